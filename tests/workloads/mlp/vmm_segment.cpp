#include "vmm_segment.h"

#include <cstdio>
#include <cstdlib>

#include <unistd.h>

#include "workload_util.h"

namespace mlp {

VmmSegment::VmmSegment(std::size_t reserve_bytes, bool shareable) {
  CUdevice device = 0;
  CU_CHECK(cuCtxGetDevice(&device));
  prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop_.location.id = device;
  if (shareable) prop_.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CU_CHECK(cuMemGetAllocationGranularity(&page_, &prop_, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  reserved_ = (reserve_bytes + page_ - 1) / page_ * page_;
  CU_CHECK(cuMemAddressReserve(&base_, reserved_, 0, 0, 0));
}

void VmmSegment::share_first_page() {
  if (pages_.empty() || shared_fd_ >= 0) return;
  CU_CHECK(cuMemExportToShareableHandle(&shared_fd_, pages_[0],
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
}

VmmSegment::~VmmSegment() {
  if (shared_fd_ >= 0) close(shared_fd_);
  if (mapped_) cuMemUnmap(base_, mapped_);
  for (CUmemGenericAllocationHandle h : pages_) cuMemRelease(h);
  cuMemAddressFree(base_, reserved_);
}

CUdeviceptr VmmSegment::allocate(std::size_t bytes) {
  std::size_t at = (used_ + 255) / 256 * 256;
  grow_to(at + bytes);
  used_ = at + bytes;
  return base_ + at;
}

void VmmSegment::grow_to(std::size_t bytes) {
  if (bytes > reserved_) {
    std::fprintf(stderr, "mlp_train: the --vmm segment of %zu bytes is full\n", reserved_);
    std::exit(1);
  }
  while (mapped_ < bytes) {
    CUmemGenericAllocationHandle page = 0;
    CU_CHECK(cuMemCreate(&page, page_, &prop_, 0));
    CU_CHECK(cuMemMap(base_ + mapped_, page_, 0, page, 0));
    CUmemAccessDesc access{};
    access.location = prop_.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU_CHECK(cuMemSetAccess(base_ + mapped_, page_, &access, 1));
    pages_.push_back(page);  // held: PyTorch releases a page's handle only when it unmaps it
    mapped_ += page_;
  }
}

}  // namespace mlp
