// gcrd's own hold on the GPU: one warm primary context per device (so no checkpoint or restore
// pays driver initialisation on its path), and physical allocations mapped into gcrd's address
// space — imported from a process's parked fds, or created here for a restore.
//
// Every allocation owner is RAII: a failure part way releases exactly what was taken.
#pragma once

#include <cuda.h>
#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string>

#include "gcr/result.h"
#include "gcr/unique_fd.h"
#include "held_memory.h"
#include "hex_address.h"

namespace gcr::gcrd {

// An Error from a driver call: "cuMemMap failed: CUDA_ERROR_OUT_OF_MEMORY (2)".
Error driver_error(const char* call, CUresult r);

// After a `criu dump --leave-running`: the CRIU plugin's exit hook restores and unlocks the
// process's CUDA state, but CRIU reports the dump a success even when that failed. Checks the
// driver's view of `pid` and finishes the job: true when it had to (the process was left locked
// or checkpointed), false when the process was running (or does not use CUDA). An error means
// the process is stuck and says so.
Result<bool> ensure_cuda_running(pid_t pid);

class Gpu {
 public:
  // Initializes the driver and retains every device's primary context, once per process.
  static Result<Gpu*> get();

  int device_count() const { return count_; }
  // Makes device `ordinal`'s primary context current on the calling thread.
  Status use(int ordinal);
  std::string name(int ordinal) const;
  std::string uuid(int ordinal) const;  // "GPU-xxxxxxxx-xxxx-..."
  std::uint64_t total_bytes(int ordinal) const;
  std::uint64_t free_bytes(int ordinal);
  int driver_version() const { return driver_version_; }

 private:
  int count_ = 0;
  int driver_version_ = 0;
  CUcontext contexts_[64] = {};
};

// A physical allocation mapped read-write in gcrd at an address of gcrd's choosing.
class MappedAllocation {
 public:
  MappedAllocation() = default;
  MappedAllocation(MappedAllocation&& o) noexcept { *this = std::move(o); }
  MappedAllocation& operator=(MappedAllocation&& o) noexcept;
  MappedAllocation(const MappedAllocation&) = delete;
  MappedAllocation& operator=(const MappedAllocation&) = delete;
  ~MappedAllocation() { reset(); }

  // Imports an allocation exported as a POSIX fd (the fd stays the caller's).
  static Result<MappedAllocation> import(int fd, std::uint64_t size);
  // Creates an exportable allocation on `device`.
  static Result<MappedAllocation> create(std::uint64_t size, int device);

  CUdeviceptr address() const { return va_; }
  std::uint64_t size() const { return size_; }
  int device() const { return device_; }
  Result<UniqueFd> export_fd() const;

  Status read(std::uint64_t offset, std::span<std::byte> out) const;        // device -> host
  Status write(std::uint64_t offset, std::span<const std::byte> in) const;  // host -> device
  Status copy_from(const MappedAllocation& src) const;                      // device -> device

  void reset() noexcept;

 private:
  Status map(CUmemGenericAllocationHandle handle, std::uint64_t size, int device);

  CUmemGenericAllocationHandle handle_ = 0;
  CUdeviceptr va_ = 0;
  std::uint64_t size_ = 0;
  int device_ = 0;
  bool mapped_ = false;
};

}  // namespace gcr::gcrd
