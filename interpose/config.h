// The interposer's settings, read once from GCR_* environment variables at first CUDA use.
//   GCR_REAL_LIBCUDA   absolute path of the real libcuda.so.1 (gcr run sets it to simgpu's when
//                      the machine has no NVIDIA driver)
//   GCR_TRACK          "speculative" (default): const T* kernel parameters are reads;
//                      "precise": every pointer parameter may be written;
//                      "conservative": every launch may write every region (for kernels that
//                      follow device pointers stored in device memory);
//                      "validate": speculative, checked around every launch (validate.h)
//   GCR_TRACK_PROFILE  kernels to count as writing every region, one (mangled) name a line;
//                      GCR_TRACK=validate appends those it catches
//   GCR_ARENA_BYTES    size of the reserved device address arena (default: 2x total device memory)
//   GCR_SMALL_BYTES    allocations up to this size share 2 MiB slabs (default 1 MiB)
//   GCR_COW_COPY       1 (default): during a --leave-running checkpoint's drain, a write to a
//                      region gcrd has not read yet copies the region first (device memory for
//                      one region at a time); 0: the write waits until gcrd has read it (for a
//                      GPU without room for copies)
//   GCR_LOG            1: log each region allocation and control operation to stderr
//   GCR_LOCK_ORDER     abort: a lock taken against Note [Lock order] (locks.h) aborts the program
//                      after it is reported (default: reported once, the program runs on)
#pragma once

#include <cstdint>
#include <string>

namespace gcr::interpose {

enum class TrackMode { speculative, precise, conservative, validate };

struct Config {
  std::string real_libcuda;
  TrackMode track = TrackMode::speculative;
  std::uint64_t arena_bytes = 0;  // 0: derived from the devices' memory
  std::uint64_t small_bytes = 1u << 20;
  bool cow_copy = true;
  bool log = false;
  bool lock_order_abort = false;
};

const Config& config();

}  // namespace gcr::interpose
