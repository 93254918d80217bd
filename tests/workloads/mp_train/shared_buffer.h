// Device memory shared between the ranks, one owner class per way of getting it. Each releases
// what it took in reverse order; destructors ignore errors (the process is ending or the buffer
// is being dropped after its last use).
#pragma once

#include <cuda.h>

#include <cstddef>

#include "unique_fd.h"

namespace mp {

class SharedBuffer {
 public:
  virtual ~SharedBuffer() = default;
  CUdeviceptr address() const { return address_; }
  std::size_t size() const { return size_; }

 protected:
  SharedBuffer() = default;
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;
  CUdeviceptr address_ = 0;
  std::size_t size_ = 0;
};

// cuMemCreate memory exportable as a POSIX fd (created here, or imported from a peer's fd),
// mapped read-write for the current device.
class VmmBuffer : public SharedBuffer {
 public:
  static constexpr auto kHandleType = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  explicit VmmBuffer(std::size_t bytes);             // cuMemCreate, rounded up to the granularity
  VmmBuffer(const UniqueFd& fd, std::size_t bytes);  // cuMemImportFromShareableHandle
  ~VmmBuffer() override;
  CUmemGenericAllocationHandle handle() const { return handle_; }
  UniqueFd export_fd() const;

 private:
  void map(std::size_t bytes);
  CUmemGenericAllocationHandle handle_ = 0;
  bool mapped_ = false;
};

// cuMemAlloc memory and its legacy IPC handle.
class IpcBuffer : public SharedBuffer {
 public:
  explicit IpcBuffer(std::size_t bytes);
  ~IpcBuffer() override;
  CUipcMemHandle ipc_handle() const;
};

// A peer's IpcBuffer, opened with cuIpcOpenMemHandle.
class IpcMapping : public SharedBuffer {
 public:
  IpcMapping(const CUipcMemHandle& handle, std::size_t bytes);
  ~IpcMapping() override;
};

}  // namespace mp
