// Threads that give the CPU to a critical path while it runs (Note [Loading behind the restore] in
// daemon/loader.h; the store's workers, gcr/store_workers.h): SCHED_IDLE, which gets only CPU
// time nothing else wants.
#pragma once

#include <sched.h>

namespace gcr {

// Whether a thread of this process can go to SCHED_IDLE and come back: leaving SCHED_IDLE takes
// CAP_SYS_NICE or an RLIMIT_NICE of 20 (sched(7)), and a thread stuck there would starve whoever
// waits for it. Probed once, on a thread of its own.
bool can_run_in_background();

// Whether the calling thread runs at SCHED_IDLE (a caller whose work should run there too).
bool in_background();

// The calling thread in the background (SCHED_IDLE) or not: not is the class the thread had before
// it went there (a gcrd started at SCHED_BATCH stays there), put back when the scope ends. It goes
// to the background only where it can come back (can_run_in_background), and a thread that was at
// SCHED_IDLE already stays there. A scope never set costs nothing. A thread has one at a time.
class BackgroundScope {
 public:
  BackgroundScope() = default;
  ~BackgroundScope() { set(false); }
  BackgroundScope(const BackgroundScope&) = delete;
  BackgroundScope& operator=(const BackgroundScope&) = delete;

  void set(bool background);
  bool on() const { return on_; }

 private:
  int policy_ = SCHED_OTHER;  // the thread's own, while on
  sched_param param_{};
  bool on_ = false;
};

}  // namespace gcr
