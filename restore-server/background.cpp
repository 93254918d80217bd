// BackgroundScope and its probe (background.h).
#include "background.h"

#include <sched.h>

#include <thread>

namespace gcr::gcrd {
namespace {

bool set_policy(int policy) {
  sched_param p{};
  return sched_setscheduler(0, policy, &p) == 0;  // 0: the calling thread alone
}

}  // namespace

bool can_run_in_background() {
  static const bool can = [] {
    bool back = false;
    std::thread probe([&] { back = set_policy(SCHED_IDLE) && set_policy(SCHED_OTHER); });
    probe.join();
    return back;
  }();
  return can;
}

void BackgroundScope::set(bool background) {
  if (background == on_) return;
  if (set_policy(background ? SCHED_IDLE : SCHED_OTHER)) on_ = background;
}

}  // namespace gcr::gcrd
