#include "system_tool.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "gcr/unique_fd.h"

extern char** environ;

namespace gcr::gcrd {

std::optional<std::string> find_system_tool(const char* name) {
  for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"}) {
    std::string path = std::string(dir) + name;
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return std::nullopt;
}

namespace {
std::string command_text(const std::vector<std::string>& argv) {
  std::string text;
  for (const std::string& a : argv) text += (text.empty() ? "" : " ") + a;
  return text;
}
}  // namespace

Status run_system_tool(const std::vector<std::string>& argv) {
  int err[2];
  if (::pipe2(err, O_CLOEXEC) != 0) return errno_error("pipe for " + argv[0]);
  UniqueFd read_end(err[0]), write_end(err[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), 2);
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  pid_t child = 0;
  const int rc = ::posix_spawn(&child, cargv[0], &actions, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  write_end.reset();
  if (rc != 0) return errno_error("starting " + argv[0], rc);
  std::string said;
  char buf[512];
  for (ssize_t n; (n = ::read(read_end.get(), buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    said.append(buf, static_cast<std::size_t>(n));
    if (said.size() > 4096) said.erase(0, said.size() - 400);
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0)
    if (errno != EINTR) return errno_error("waiting for " + argv[0]);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return ok();
  while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
  if (said.size() > 400) said.erase(0, said.size() - 400);
  return Error{Errc::io_error,
               "`" + command_text(argv) + "` failed" + (said.empty() ? "" : ": " + said)};
}

}  // namespace gcr::gcrd
