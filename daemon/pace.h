// An upper bound on how fast gcrd moves device memory (GCR_DRAIN_MIB_PER_S for checkpoints,
// GCR_LOAD_MIB_PER_S for restores): to leave disk bandwidth to the applications, and to let tests
// watch a slow drain or load. It never holds up a process that waits: `urgent` cuts a wait short.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>

namespace gcr::gcrd {

class Pace {
 public:
  // At most `mib_per_s` MiB/s (Settings::drain_mib_per_s or load_mib_per_s); 0: no bound.
  explicit Pace(std::uint64_t mib_per_s) : bytes_per_s_(mib_per_s << 20) {}

  // Waits until `done_bytes` are due, or until urgent() says something cannot wait.
  void wait(std::uint64_t done_bytes, const std::function<bool()>& urgent) const {
    if (!bytes_per_s_) return;
    using Clock = std::chrono::steady_clock;
    auto due = started_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                              static_cast<double>(done_bytes) / static_cast<double>(bytes_per_s_)));
    while (Clock::now() < due) {
      if (urgent && urgent()) return;
      std::this_thread::sleep_for(
          std::min<Clock::duration>(std::chrono::milliseconds(10), due - Clock::now()));
    }
  }

 private:
  std::uint64_t bytes_per_s_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace gcr::gcrd
