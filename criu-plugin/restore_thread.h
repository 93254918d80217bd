// Running the driver's checkpoint thread of a process that CRIU holds stopped under ptrace.
//
// Note [Restore thread]
// The driver does checkpoint and restore work on a thread inside the target (the "restore thread"
// cuCheckpointProcessGetRestoreThreadId names). When CRIU calls CHECKPOINT_DEVICES, every thread
// of the target is in a ptrace stop; when it calls RESUME_DEVICES_LATE, every restored thread is
// stopped at the exit of rt_sigreturn; in exit(DUMP) the tasks are still seized. So, as CRIU's
// cuda plugin does (plugins/cuda/cuda_plugin.c, resume_restore_thread/interrupt_restore_thread),
// the plugin lets that one thread run around the driver call:
//   1. save its signal mask (PTRACE_GETSIGMASK) and block every signal but SIGTRAP, so that no
//      signal meant for the process is handled while the rest of it is stopped;
//   2. clear its ptrace options (PTRACE_O_SUSPEND_SECCOMP among them: the driver thread runs
//      under the process's own seccomp filter) and PTRACE_CONT it;
//   3. after the driver call, PTRACE_INTERRUPT it and wait (waitpid __WALL) for the
//      PTRACE_EVENT_STOP, passing on any signal stop met on the way, as compel_wait_task does;
//   4. put back the options CRIU had set (PTRACE_O_TRACESYSGOOD, plus PTRACE_O_SUSPEND_SECCOMP
//      when the thread has a seccomp mode: compel's and cr-restore's rule; ptrace cannot read
//      options back) and the saved signal mask.
// The caller is CRIU's main thread, the tracer: ptrace requests from any other thread fail.
//
// A thread that ptrace answers ESRCH for is not stopped under this process (e.g. exit(DUMP) after
// a failure before CRIU seized the task): it runs already, and there is nothing to do around it.
#pragma once

#include <cstdint>

#include "gcr/result.h"

namespace gcr::criu_plugin {

class RestoreThreadRun {
 public:
  // Steps 1-2. Fails, leaving the thread as it was, when ptrace refuses.
  static Result<RestoreThreadRun> start(int tid);

  RestoreThreadRun(RestoreThreadRun&& other) noexcept;
  RestoreThreadRun& operator=(RestoreThreadRun&&) = delete;
  RestoreThreadRun(const RestoreThreadRun&) = delete;
  ~RestoreThreadRun();  // stop() if not done yet; a failure is logged

  // Steps 3-4. Idempotent. Fails when the thread died or ptrace refuses; the process is then in a
  // state CRIU will notice (a thread that does not stop).
  Status stop();

  bool traced() const { return traced_; }

 private:
  RestoreThreadRun(int tid, bool traced, std::uint64_t sigmask)
      : tid_(tid), traced_(traced), sigmask_(sigmask) {}

  int tid_ = -1;
  bool traced_ = false;  // false: not stopped under us, nothing to undo
  bool running_ = false;
  std::uint64_t sigmask_ = 0;
};

}  // namespace gcr::criu_plugin
