// An expandable segment, the way PyTorch's allocator builds one with expandable_segments:True:
// one reserved range of device addresses, grown a page at a time, each page its own cuMemCreate
// allocation mapped at the end of the range. The handles are kept for the segment's life: the
// pattern that leaves the program holding handles to memory a checkpoint must capture.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <vector>

namespace mlp {

class VmmSegment {
 public:
  // On the current context's device; `shareable`: pages can be exported as POSIX fds.
  VmmSegment(std::size_t reserve_bytes, bool shareable);
  ~VmmSegment();
  VmmSegment(const VmmSegment&) = delete;
  VmmSegment& operator=(const VmmSegment&) = delete;

  // `bytes` from the segment, 256-byte aligned; maps more pages as it needs them.
  CUdeviceptr allocate(std::size_t bytes);
  // Exports the first page as a POSIX fd, which the segment keeps open (for a peer to import).
  void share_first_page();

 private:
  void grow_to(std::size_t bytes);

  CUmemAllocationProp prop_{};
  CUdeviceptr base_ = 0;
  std::size_t reserved_ = 0, mapped_ = 0, used_ = 0, page_ = 0;
  std::vector<CUmemGenericAllocationHandle> pages_;
  int shared_fd_ = -1;
};

}  // namespace mlp
