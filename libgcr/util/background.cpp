// BackgroundScope and its probe (gcr/background.h).
#include "gcr/background.h"

#include <thread>

namespace gcr {

bool can_run_in_background() {
  static const bool can = [] {
    bool back = false;
    std::thread probe([&] {
      const int policy = sched_getscheduler(0);
      sched_param own{}, idle{};
      if (policy < 0 || policy == SCHED_IDLE || sched_getparam(0, &own) != 0) return;
      back = sched_setscheduler(0, SCHED_IDLE, &idle) == 0 &&
             sched_setscheduler(0, policy, &own) == 0;  // 0: the calling thread alone
    });
    probe.join();
    return back;
  }();
  return can;
}

BackgroundScope::BackgroundScope() {
  const int policy = sched_getscheduler(0);
  if (policy >= 0 && sched_getparam(0, &param_) == 0) policy_ = policy;
}

void BackgroundScope::set(bool background) {
  if (background == on_) return;
  if (background && (policy_ == SCHED_IDLE || !can_run_in_background())) return;
  sched_param idle{};
  if (sched_setscheduler(0, background ? SCHED_IDLE : policy_, background ? &idle : &param_) == 0)
    on_ = background;
}

}  // namespace gcr
