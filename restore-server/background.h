// Threads that give the CPU to a critical path while it runs (Note [Loading behind the restore] in
// loader.h): SCHED_IDLE, which gets only CPU time nothing else wants.
#pragma once

namespace gcr::gcrd {

// Whether a thread of gcrd can go to SCHED_IDLE and come back: leaving SCHED_IDLE takes
// CAP_SYS_NICE or an RLIMIT_NICE of 20 (sched(7)), and a loader stuck there would starve the
// process it loads for. Probed once, on a thread of its own.
bool can_run_in_background();

// The calling thread's scheduling class, in the background (SCHED_IDLE) or not (SCHED_OTHER);
// set back to SCHED_OTHER when the scope ends. A thread has one at a time.
class BackgroundScope {
 public:
  BackgroundScope() = default;
  ~BackgroundScope() { set(false); }
  BackgroundScope(const BackgroundScope&) = delete;
  BackgroundScope& operator=(const BackgroundScope&) = delete;

  void set(bool background);
  bool on() const { return on_; }

 private:
  bool on_ = false;
};

}  // namespace gcr::gcrd
