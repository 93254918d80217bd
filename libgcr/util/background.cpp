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

bool in_background() {
  return sched_getscheduler(0) == SCHED_IDLE;
}

void BackgroundScope::set(bool background) {
  if (background == on_) return;
  if (!background) {
    if (sched_setscheduler(0, policy_, &param_) == 0) on_ = false;
    return;
  }
  policy_ = sched_getscheduler(0);
  if (policy_ < 0 || policy_ == SCHED_IDLE || sched_getparam(0, &param_) != 0 ||
      !can_run_in_background())
    return;
  sched_param idle{};
  if (sched_setscheduler(0, SCHED_IDLE, &idle) == 0) on_ = true;
}

}  // namespace gcr
