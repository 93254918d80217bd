// The region access gate of soft copy-on-write and on-demand restore (interpose/cow.cpp; Notes
// [Soft copy-on-write] and [On-demand restore] in gcr/cow_table.h): what the write and touch
// marking of regions.h calls on its slow path. Its own header, so that regions.h (which marks) and
// cow.cpp (which copies regions) depend on it and not on each other.
#pragma once

#include <atomic>
#include <cstdint>

namespace gcr::interpose {

// While gcrd drains a --leave-running checkpoint, a write to a region it has not read yet copies
// the region first. During an on-demand restore (g_touch_waits), reads wait too: a region not
// loaded yet is waited for before any call that touches it.
extern std::atomic<bool> g_cow_active;
extern std::atomic<bool> g_touch_waits;
void cow_before_write(std::uint32_t region_id) noexcept;
void cow_before_write_all() noexcept;

}  // namespace gcr::interpose
