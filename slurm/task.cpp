// task.h.
#include "task.h"

#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "gcr/unique_fd.h"
#include "gcrd_client.h"
#include "slurm_env.h"
#include "supervisor_wire.h"

namespace gcr::slurm {
namespace {

[[noreturn]] void exec_under_gcr(const std::vector<std::string>& command) {
  std::vector<std::string> all{"gcr", "run", "--"};
  all.insert(all.end(), command.begin(), command.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv("/proc/self/exe", argv.data());
  std::fprintf(stderr, "gcr: cannot run gcr run: %s\n", std::strerror(errno));
  _exit(127);
}

// This node's gcrd's --listen address: how the job's other hosts reach this task's part.
Result<std::string> node_gcrd() {
  auto fd = gcrd::connect_running(gcrd::default_socket_path());
  if (!fd) return std::move(fd).context("this node's gcrd").error();
  UniqueFd conn(*fd);
  GCR_TRY_ASSIGN(auto reply, gcrd::call(conn.get(), "ping", {}, [](const std::string&) {}));
  auto it = reply.find("listen");
  if (it == reply.end() || it->second.empty())
    return Error{Errc::unsupported,
                 "this node's gcrd does not listen on the network: start it with gcr daemon "
                 "--listen ADDRESS:PORT --token-file FILE (docs/slurm.md)"};
  return it->second;
}

Result<UniqueFd> connect_to(const std::string& host_port) {
  auto colon = host_port.rfind(':');
  if (colon == std::string::npos)
    return Error{Errc::invalid_argument,
                 "GCR_SLURM_SUPERVISOR='" + host_port + "' is not HOST:PORT"};
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const std::string host = host_port.substr(0, colon), port = host_port.substr(colon + 1);
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &list); rc != 0)
    return Error{Errc::unreachable, "the job's supervisor " + host_port + ": " + gai_strerror(rc)};
  UniqueFd fd(::socket(list->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int rc = fd ? ::connect(fd.get(), list->ai_addr, list->ai_addrlen) : -1;
  freeaddrinfo(list);
  if (rc != 0) return errno_error("connecting to the job's supervisor at " + host_port);
  return fd;
}

}  // namespace

Result<int> stand_in_for(pid_t pid) {
  UniqueFd rank(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  if (!rank) return errno_error("the restored rank, pid " + std::to_string(pid));
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT, SIGALRM, SIGURG})
    sigaddset(&set, s);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  UniqueFd signals(signalfd(-1, &set, SFD_CLOEXEC));
  if (!signals) return errno_error("signalfd");
  for (;;) {
    pollfd p[2] = {{rank.get(), POLLIN, 0}, {signals.get(), POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return errno_error("poll");
    }
    if (p[0].revents) return 0;
    signalfd_siginfo info{};
    if (::read(signals.get(), &info, sizeof info) == sizeof info)
      syscall(SYS_pidfd_send_signal, rank.get(), static_cast<int>(info.ssi_signo), nullptr, 0);
  }
}

Result<int> run_task(const std::vector<std::string>& command) {
  if (command.empty()) return Error{Errc::invalid_argument, "gcr slurm task: no command after --"};
  GCR_TRY_ASSIGN(SlurmEnv env, read_slurm_env(true));
  setenv("GCR_START_GCRD", "0", 0);                     // as the supervisor's (run_supervisor)
  if (env.supervisor.empty()) exec_under_gcr(command);  // srun --gcr alone: no requeue to serve
  auto gcrd = node_gcrd();
  if (!gcrd) {
    std::fprintf(stderr,
                 "gcr: warning: task %u runs under gcr but cannot be checkpointed with its job: "
                 "%s\n",
                 env.procid, gcrd.error().message.c_str());
    exec_under_gcr(command);
  }
  GCR_TRY_ASSIGN(UniqueFd conn, connect_to(env.supervisor));
  Registration r{env.step, env.procid, env.ntasks, env.node, getpid(), *gcrd};
  GCR_TRY(write_all(conn.get(), encode_registration(env.key, r)));
  auto line = read_line(conn.get(), 4096, -1);
  if (!line) return std::move(line).context("the job's supervisor").error();
  GCR_TRY_ASSIGN(Answer a, decode_answer(*line));
  switch (a.kind) {
    case Answer::Kind::run:
      conn.reset();
      exec_under_gcr(command);
    case Answer::Kind::restored:
      conn.reset();
      return stand_in_for(a.pid);
    case Answer::Kind::error:
      break;
  }
  return Error{Errc::internal, "task " + std::to_string(env.procid) + ": " + a.message};
}

}  // namespace gcr::slurm
