// FrozenThreads (tree_freeze.h): ptrace's seize and interrupt, as CRIU's compel freezes a tree.
#include "tree_freeze.h"

#include <dirent.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
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

// A thread that is exiting (a zombie, or dead): ptrace refuses it, and it holds nothing.
bool exiting(pid_t tid) {
  std::ifstream in("/proc/" + std::to_string(tid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return true;
  auto paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] == 'Z' ||
         line[paren + 2] == 'X';
}

// How long a thread may take to stop: one in uninterruptible sleep (the driver, a slow file
// system) stops when it leaves it.
constexpr auto kStopLimit = std::chrono::seconds(5);

// Seizes and stops `tid`: false when it has exited meanwhile; its stop signal in *signal. On a
// failure the thread is let go, or (stopping too late for the limit) left to the kernel, which
// lets it go when this thread, its tracer, ends.
Result<bool> hold(pid_t tid, int* signal) {
  if (::ptrace(PTRACE_SEIZE, tid, nullptr, nullptr) != 0) {
    if (errno == ESRCH || (errno == EPERM && exiting(tid))) return false;
    return errno_error("holding thread " + std::to_string(tid) +
                       " still (ptrace; a debugger attached to it?)");
  }
  if (::ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr) != 0) {
    if (errno == ESRCH) return false;
    Error e = errno_error("interrupting thread " + std::to_string(tid));
    (void)::ptrace(PTRACE_DETACH, tid, nullptr, nullptr);
    return e;
  }
  const auto deadline = std::chrono::steady_clock::now() + kStopLimit;
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(tid, &status, __WALL | WNOHANG);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return false;  // it exited
    if (r == tid) break;
    if (std::chrono::steady_clock::now() >= deadline)
      return Error{Errc::timeout, "thread " + std::to_string(tid) + " did not stop within " +
                                      std::to_string(kStopLimit.count()) +
                                      " s (in uninterruptible sleep?)"};
    ::usleep(200);
  }
  if (!WIFSTOPPED(status)) return false;  // it exited
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
