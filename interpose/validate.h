// Note [Validating write tracking]
// GCR_TRACK=validate (`gcr run --track validate`) checks, launch by launch, what speculative
// tracking infers (Note [Write tracking]): before a launch the context is synchronized and every
// region the launch's parameters do not name as written is hashed (XXH3-128, read back with
// cuMemcpyDtoH); after it, synchronized again and hashed again. A region that changed was written
// where gcr could not see, typically through a device pointer stored in device memory (a pointer
// table, NCCL-style descriptors): the kernel is named on stderr, the region is marked written (so
// that this run's checkpoints stay right), and, with GCR_TRACK_PROFILE=FILE, the kernel's name is
// appended to FILE. Every run given that profile (any GCR_TRACK) counts the kernels it names as
// writing every region. Validation costs a read of all device memory per launch: a mode for a
// test run, never for production. Launches whose layout is unknown, graphs and batched memory
// operations are already conservative and are not checked.
#pragma once

#include <cuda.h>

#include <string>
#include <vector>

#include "gcr/chunk_id.h"

namespace gcr::interpose {

// Whether GCR_TRACK_PROFILE names this kernel (loaded once; cold path: a function's first launch).
bool profiled_as_writing_all(const std::string& kernel_name);

// The regions a launch's parameters name as written (launch.cpp, Note [Write tracking]), and the
// kernel's name; known is false when the launch counts as writing everything anyway.
struct LaunchWrites {
  bool known = false;
  std::string kernel;
  std::vector<std::uint32_t> regions;
};
LaunchWrites launch_writes(CUfunction f, void** params, void** extra);

// Around one launch under GCR_TRACK=validate: construct before it, after() once it returned.
class LaunchValidation {
 public:
  LaunchValidation(CUfunction f, void** params, void** extra);
  void after(CUresult launched);

 private:
  struct Entry {
    std::uint32_t region;
    std::uint64_t address, size;
    gcr::store::ChunkId hash;
  };
  std::string kernel_;
  std::vector<Entry> entries_;
};

}  // namespace gcr::interpose
