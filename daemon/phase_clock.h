// How gcrd times the phases of a checkpoint or restore: each phase's length for the summary, and
// its start on CLOCK_MONOTONIC (steady_clock on Linux) so that `--trace` lines gcrd's phases up
// with the kernel's events (Note [Kernel timeline] in trace/timeline.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace gcr::gcrd {

using Clock = std::chrono::steady_clock;

inline std::uint64_t ns_since(Clock::time_point t) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count());
}

// Report: a CheckpointReport or RestoreReport (times_ns and starts_ns by phase).
template <typename Report>
void record_phase(Report& rep, const std::string& phase, Clock::time_point start) {
  rep.times_ns[phase] = ns_since(start);
  rep.starts_ns[phase] = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count());
}

}  // namespace gcr::gcrd
