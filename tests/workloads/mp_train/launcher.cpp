#include "launcher.h"

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "socket.h"
#include "tcp_socket.h"

namespace mp {

namespace {

pid_t spawn_rank(int rank, int argc, char** argv, const std::vector<std::string>& extra) {
  std::vector<std::string> args(argv, argv + argc);
  args.push_back("--rank");
  args.push_back(std::to_string(rank));
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> c_args;
  for (std::string& a : args) c_args.push_back(a.data());
  c_args.push_back(nullptr);
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) fail_errno("fork");
  if (pid == 0) {
    ::execv("/proc/self/exe", c_args.data());
    std::perror("mp_train: exec of a rank");
    ::_exit(127);
  }
  return pid;
}

int exit_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

int launch_ranks(const Options& options, int argc, char** argv) {
  const int ranks = options.ranks;
  std::vector<std::string> extra{"--job", std::to_string(::getpid())};
  if (is_tcp(options) && options.store.empty()) {
    extra.push_back("--store");
    extra.push_back("127.0.0.1:" + std::to_string(tcp_free_port()));
  }
  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) pids.push_back(spawn_rank(r, argc, argv, extra));
  int result = 0;
  for (int left = ranks; left > 0; --left) {
    int status = 0;
    pid_t pid;
    do pid = ::waitpid(-1, &status, 0);
    while (pid < 0 && errno == EINTR);
    if (pid < 0) fail_errno("waitpid");
    int rank = -1;
    for (int r = 0; r < ranks; ++r) {
      if (pids[r] == pid) {
        rank = r;
        pids[r] = 0;
      }
    }
    if (rank < 0) {
      ++left;  // not one of ours
      continue;
    }
    int code = exit_status(status);
    if (code != 0 && result == 0) {
      result = code;
      std::fflush(stdout);
      std::fprintf(stderr, "mp_train: rank %d failed (status %d); stopping the others\n", rank,
                   code);
      for (pid_t other : pids) {
        if (other > 0) ::kill(other, SIGKILL);
      }
    }
  }
  return result;
}

}  // namespace mp
