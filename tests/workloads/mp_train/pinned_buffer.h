// Pinned host memory that the device reaches too (cuMemHostAlloc with DEVICEMAP | PORTABLE), as
// NCCL's host staging buffers and flags are: the host writes it with plain or atomic stores, a
// stream with copies, kernels and stream memory operations through device().
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstring>

#include "workload_util.h"

namespace mp {

class PinnedBuffer {
 public:
  explicit PinnedBuffer(std::size_t bytes) : size_(bytes) {
    CU_CHECK(cuMemHostAlloc(&host_, bytes, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    std::memset(host_, 0, bytes);
    CU_CHECK(cuMemHostGetDevicePointer(&device_, host_, 0));
  }
  ~PinnedBuffer() { cuMemFreeHost(host_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  char* host() const { return static_cast<char*>(host_); }
  CUdeviceptr device() const { return device_; }
  std::size_t size() const { return size_; }

 private:
  void* host_ = nullptr;
  CUdeviceptr device_ = 0;
  std::size_t size_;
};

}  // namespace mp
