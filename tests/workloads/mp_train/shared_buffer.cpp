#include "shared_buffer.h"

#include <cstdint>

#include "workload_util.h"

namespace mp {

namespace {

CUmemAllocationProp allocation_prop() {
  CUdevice device = 0;
  CU_CHECK(cuCtxGetDevice(&device));
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = VmmBuffer::kHandleType;
  return prop;
}

std::size_t round_to_granularity(std::size_t bytes) {
  CUmemAllocationProp prop = allocation_prop();
  std::size_t granularity = 0;
  CU_CHECK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  return (bytes + granularity - 1) / granularity * granularity;
}

}  // namespace

VmmBuffer::VmmBuffer(std::size_t bytes) {
  CUmemAllocationProp prop = allocation_prop();
  size_ = round_to_granularity(bytes);
  CU_CHECK(cuMemCreate(&handle_, size_, &prop, 0));
  map(size_);
}

VmmBuffer::VmmBuffer(const UniqueFd& fd, std::size_t bytes) {
  size_ = round_to_granularity(bytes);
  CU_CHECK(cuMemImportFromShareableHandle(
      &handle_, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd.get())), kHandleType));
  map(size_);
}

void VmmBuffer::map(std::size_t bytes) {
  CU_CHECK(cuMemAddressReserve(&address_, bytes, 0, 0, 0));
  CU_CHECK(cuMemMap(address_, bytes, 0, handle_, 0));
  mapped_ = true;
  CUmemAccessDesc access{};
  access.location = allocation_prop().location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU_CHECK(cuMemSetAccess(address_, bytes, &access, 1));
}

VmmBuffer::~VmmBuffer() {
  if (mapped_) cuMemUnmap(address_, size_);
  if (address_) cuMemAddressFree(address_, size_);
  if (handle_) cuMemRelease(handle_);
}

UniqueFd VmmBuffer::export_fd() const {
  int fd = -1;
  CU_CHECK(cuMemExportToShareableHandle(&fd, handle_, kHandleType, 0));
  return UniqueFd(fd);
}

IpcBuffer::IpcBuffer(std::size_t bytes) {
  size_ = bytes;
  CU_CHECK(cuMemAlloc(&address_, bytes));
}

IpcBuffer::~IpcBuffer() {
  cuMemFree(address_);
}

CUipcMemHandle IpcBuffer::ipc_handle() const {
  CUipcMemHandle h;
  CU_CHECK(cuIpcGetMemHandle(&h, address_));
  return h;
}

IpcMapping::IpcMapping(const CUipcMemHandle& handle, std::size_t bytes) {
  size_ = bytes;
  CU_CHECK(cuIpcOpenMemHandle(&address_, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
}

IpcMapping::~IpcMapping() {
  cuIpcCloseMemHandle(address_);
}

}  // namespace mp
