// child_command.h.
#include "child_command.h"

#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace gcr::slurm {

Result<ChildCommand> ChildCommand::gcr(const std::vector<std::string>& args, std::string what) {
  std::vector<std::string> argv{"/proc/self/exe"};
  argv.insert(argv.end(), args.begin(), args.end());
  return start(argv, std::move(what));
}

Result<ChildCommand> ChildCommand::start(const std::vector<std::string>& argv_in,
                                         std::string what) {
  ChildCommand c;
  c.what_ = std::move(what);
  c.out_ = UniqueFd(memfd_create("gcr-slurm-output", MFD_CLOEXEC));
  if (!c.out_) return errno_error("memfd_create for " + c.what_);
  std::vector<std::string> all = argv_in;
  const std::string program = all.at(0);
  if (program == "/proc/self/exe") all[0] = "gcr";
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int out = c.out_.get();
  c.pid_ = fork();
  if (c.pid_ < 0) return errno_error("fork for " + c.what_);
  if (c.pid_ == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (dup2(out, STDOUT_FILENO) < 0) _exit(127);
    execvp(program.c_str(), argv.data());
    std::fprintf(stderr, "gcr: cannot run %s: %s\n", program.c_str(), std::strerror(errno));
    _exit(127);
  }
  c.pidfd_ = UniqueFd(static_cast<int>(syscall(SYS_pidfd_open, c.pid_, 0)));
  if (!c.pidfd_) {
    Error e = errno_error("pidfd_open for " + c.what_);
    c.kill(SIGKILL);
    (void)c.wait();
    return e;
  }
  return c;
}

ChildCommand::ChildCommand(ChildCommand&& o) noexcept
    : pid_(o.pid_),
      pidfd_(std::move(o.pidfd_)),
      out_(std::move(o.out_)),
      what_(std::move(o.what_)),
      output_(std::move(o.output_)) {
  o.pid_ = -1;
}

ChildCommand::~ChildCommand() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

void ChildCommand::kill(int sig) {
  if (pid_ > 0) ::kill(pid_, sig);
}

Result<int> ChildCommand::finish() {
  if (pid_ <= 0) return Error{Errc::internal, what_ + " was finished already"};
  int status = 0;
  pid_t got;
  while ((got = waitpid(pid_, &status, 0)) < 0 && errno == EINTR) {
  }
  if (got < 0) return errno_error("waiting for " + what_);
  pid_ = -1;
  output_.clear();
  char buf[4096];
  for (off_t at = 0;;) {
    ssize_t n = pread(out_.get(), buf, sizeof buf, at);
    if (n <= 0) break;
    output_.append(buf, static_cast<std::size_t>(n));
    at += n;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

Result<int> ChildCommand::wait() {
  pollfd p{pidfd_.get(), POLLIN, 0};
  while (::poll(&p, 1, -1) < 0)
    if (errno != EINTR) return errno_error("waiting for " + what_);
  return finish();
}

}  // namespace gcr::slurm
