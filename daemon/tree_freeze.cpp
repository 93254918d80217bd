// FrozenThreads (tree_freeze.h): ptrace's seize and interrupt, as CRIU's compel freezes a tree.
#include "tree_freeze.h"

#include <dirent.h>
#include <sys/ptrace.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <set>
#include <string>

namespace gcr::gcrd {
namespace {

std::vector<pid_t> threads_of(pid_t pid) {
  std::vector<pid_t> out;
  DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/task").c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') out.push_back(static_cast<pid_t>(std::atoi(e->d_name)));
  ::closedir(d);
  return out;
}

// Seizes and stops `tid`: false when it has exited meanwhile; its stop signal in *signal.
Result<bool> hold(pid_t tid, int* signal) {
  if (::ptrace(PTRACE_SEIZE, tid, nullptr, nullptr) != 0) {
    if (errno == ESRCH) return false;
    return errno_error("holding thread " + std::to_string(tid) +
                       " still (ptrace; a debugger attached to it?)");
  }
  if (::ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr) != 0) {
    if (errno == ESRCH) return false;
    return errno_error("interrupting thread " + std::to_string(tid));
  }
  int status = 0;
  pid_t r;
  while ((r = ::waitpid(tid, &status, __WALL)) < 0 && errno == EINTR) {
  }
  if (r < 0 || !WIFSTOPPED(status)) return false;  // it exited
  // PTRACE_EVENT_STOP: our interrupt (or a group stop it was in). Else a signal it was about to
  // take: given back at the detach.
  *signal = (status >> 16) == PTRACE_EVENT_STOP ? 0 : WSTOPSIG(status);
  return true;
}

}  // namespace

FrozenThreads& FrozenThreads::operator=(FrozenThreads&& other) noexcept {
  if (this != &other) {
    thaw();
    threads_ = std::move(other.threads_);
    other.threads_.clear();
  }
  return *this;
}

Result<FrozenThreads> FrozenThreads::freeze(const std::vector<pid_t>& pids) {
  FrozenThreads out;
  std::set<pid_t> held;
  // Until a pass finds no thread it has not held: a thread may start one meanwhile.
  for (bool found = true; found;) {
    found = false;
    for (pid_t pid : pids)
      for (pid_t tid : threads_of(pid)) {
        if (held.contains(tid)) continue;
        held.insert(tid);
        found = true;
        int signal = 0;
        GCR_TRY_ASSIGN(bool stopped, hold(tid, &signal));
        if (stopped) out.threads_.push_back({tid, signal});
      }
  }
  return out;
}

void FrozenThreads::thaw() {
  for (const Thread& t : threads_)
    (void)::ptrace(PTRACE_DETACH, t.tid, nullptr,
                   reinterpret_cast<void*>(static_cast<long>(t.signal)));
  threads_.clear();
}

}  // namespace gcr::gcrd
