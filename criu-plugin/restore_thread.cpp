// Note [Restore thread] (restore_thread.h): the ptrace steps around one driver call.
#include "restore_thread.h"

#include <signal.h>
#include <sys/ptrace.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "log.h"

namespace gcr::criu_plugin {
namespace {

long ptrace_call(__ptrace_request req, int tid, void* addr, void* data) {
  errno = 0;
  return ptrace(req, tid, addr, data);
}

// The options CRIU set when it seized or restored the thread (compel_wait_task; cr-restore.c
// attach_to_tasks): TRACESYSGOOD, and SUSPEND_SECCOMP when the thread is under seccomp.
long criu_ptrace_options(int tid) {
  long options = PTRACE_O_TRACESYSGOOD;
  std::ifstream status("/proc/" + std::to_string(tid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Seccomp:", 0) != 0) continue;
    if (std::strtol(line.c_str() + 8, nullptr, 10) != 0) options |= PTRACE_O_SUSPEND_SECCOMP;
    break;
  }
  return options;
}

// Waits for tid's PTRACE_EVENT_STOP, re-delivering any signal stop that comes first (the
// essentials of compel_wait_task).
Status wait_for_interrupt(int tid) {
  for (;;) {
    int status = 0;
    pid_t got = waitpid(tid, &status, __WALL);
    if (got < 0) {
      if (errno == EINTR) continue;  // CRIU's SIGALRM (--timeout) during a dump
      return errno_error("waitpid(restore thread " + std::to_string(tid) + ")");
    }
    if (WIFEXITED(status) || WIFSIGNALED(status))
      return make_error(Errc::internal, "restore thread " + std::to_string(tid) +
                                            " exited while running the driver");
    if (!WIFSTOPPED(status)) continue;
    if ((status >> 16) == PTRACE_EVENT_STOP) return ok();
    // A signal stop (only SIGTRAP is unblocked): let the thread take it; the pending interrupt
    // stops it right after.
    siginfo_t si{};
    int sig =
        ptrace_call(PTRACE_GETSIGINFO, tid, nullptr, &si) == 0 ? si.si_signo : WSTOPSIG(status);
    if (ptrace_call(PTRACE_CONT, tid, nullptr, reinterpret_cast<void*>(static_cast<long>(sig))) !=
        0)
      return errno_error("PTRACE_CONT(restore thread " + std::to_string(tid) + ", signal " +
                         std::to_string(sig) + ")");
  }
}

}  // namespace

Result<RestoreThreadRun> RestoreThreadRun::start(int tid) {
  std::uint64_t saved = 0;
  if (ptrace_call(PTRACE_GETSIGMASK, tid, reinterpret_cast<void*>(sizeof saved), &saved) != 0) {
    if (errno == ESRCH) return RestoreThreadRun(tid, false, 0);
    return errno_error("PTRACE_GETSIGMASK(restore thread " + std::to_string(tid) + ")");
  }
  std::uint64_t block = ~0ull & ~(1ull << (SIGTRAP - 1));
  if (ptrace_call(PTRACE_SETSIGMASK, tid, reinterpret_cast<void*>(sizeof block), &block) != 0)
    return errno_error("PTRACE_SETSIGMASK(restore thread " + std::to_string(tid) + ")");
  RestoreThreadRun run(tid, true, saved);
  if (ptrace_call(PTRACE_SETOPTIONS, tid, nullptr, nullptr) != 0) {
    Error e = errno_error("PTRACE_SETOPTIONS(restore thread " + std::to_string(tid) + ", 0)");
    ptrace_call(PTRACE_SETSIGMASK, tid, reinterpret_cast<void*>(sizeof saved), &saved);
    run.traced_ = false;
    return e;
  }
  if (ptrace_call(PTRACE_CONT, tid, nullptr, nullptr) != 0) {
    Error e = errno_error("PTRACE_CONT(restore thread " + std::to_string(tid) + ")");
    long options = criu_ptrace_options(tid);
    ptrace_call(PTRACE_SETOPTIONS, tid, nullptr, reinterpret_cast<void*>(options));
    ptrace_call(PTRACE_SETSIGMASK, tid, reinterpret_cast<void*>(sizeof saved), &saved);
    run.traced_ = false;
    return e;
  }
  run.running_ = true;
  return run;
}

RestoreThreadRun::RestoreThreadRun(RestoreThreadRun&& other) noexcept
    : tid_(other.tid_), traced_(other.traced_), running_(other.running_), sigmask_(other.sigmask_) {
  other.traced_ = false;
  other.running_ = false;
}

RestoreThreadRun::~RestoreThreadRun() {
  if (!running_) return;
  try {
    if (Status s = stop(); !s) log_error("%s", s.error().message.c_str());
  } catch (...) {
    log_error("restore thread %d: could not stop it again", tid_);
  }
}

Status RestoreThreadRun::stop() {
  if (!running_) return ok();
  running_ = false;
  std::string who = "restore thread " + std::to_string(tid_);
  // The task was seized already, so an interrupt (not a new seize) stops it again.
  if (ptrace_call(PTRACE_INTERRUPT, tid_, nullptr, nullptr) != 0)
    return errno_error("PTRACE_INTERRUPT(" + who + "); the process may be left running");
  GCR_TRY(wait_for_interrupt(tid_));
  long options = criu_ptrace_options(tid_);
  if (ptrace_call(PTRACE_SETOPTIONS, tid_, nullptr, reinterpret_cast<void*>(options)) != 0)
    return errno_error("PTRACE_SETOPTIONS(" + who + ")");
  if (ptrace_call(PTRACE_SETSIGMASK, tid_, reinterpret_cast<void*>(sizeof sigmask_), &sigmask_) !=
      0)
    return errno_error("PTRACE_SETSIGMASK(" + who + ", saved mask)");
  return ok();
}

}  // namespace gcr::criu_plugin
