#include "device.h"

#include <cstdio>
#include <mutex>

namespace gcr::gcrd {

Error driver_error(const char* call, CUresult r) {
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  return Error{r == CUDA_ERROR_OUT_OF_MEMORY ? Errc::out_of_memory : Errc::driver,
               std::string(call) + " failed: " + (name ? name : "unknown CUDA error") + " (" +
                   std::to_string(static_cast<int>(r)) + ")"};
}

namespace {
std::once_flag g_once;
Gpu g_gpu;
Error g_gpu_error{Errc::ok, {}};
}  // namespace

Result<Gpu*> Gpu::get() {
  std::call_once(g_once, [] {
    if (CUresult r = cuInit(0)) {
      g_gpu_error = driver_error("cuInit", r);
      g_gpu_error.message += "; is a CUDA driver (or simgpu) on the library path?";
      return;
    }
    cuDriverGetVersion(&g_gpu.driver_version_);
    if (CUresult r = cuDeviceGetCount(&g_gpu.count_)) {
      g_gpu_error = driver_error("cuDeviceGetCount", r);
      return;
    }
    if (g_gpu.count_ > 64) g_gpu.count_ = 64;
    for (int d = 0; d < g_gpu.count_; ++d)
      if (CUresult r = cuDevicePrimaryCtxRetain(&g_gpu.contexts_[d], d)) {
        g_gpu_error = driver_error("cuDevicePrimaryCtxRetain", r);
        return;
      }
  });
  if (g_gpu_error.code != Errc::ok) return g_gpu_error;
  return &g_gpu;
}

Status Gpu::use(int ordinal) {
  if (ordinal < 0 || ordinal >= count_)
    return Error{Errc::invalid_argument, "device " + std::to_string(ordinal) +
                                             " does not exist (this machine has " +
                                             std::to_string(count_) + ")"};
  if (CUresult r = cuCtxSetCurrent(contexts_[ordinal])) return driver_error("cuCtxSetCurrent", r);
  return ok();
}

std::string Gpu::name(int ordinal) const {
  char buf[256] = {};
  cuDeviceGetName(buf, sizeof buf, ordinal);
  return buf;
}

std::string Gpu::uuid(int ordinal) const {
  CUuuid u{};
  cuDeviceGetUuid_v2(&u, ordinal);
  char buf[64];
  auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  std::snprintf(buf, sizeof buf,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return buf;
}

std::uint64_t Gpu::total_bytes(int ordinal) const {
  std::size_t bytes = 0;
  cuDeviceTotalMem_v2(&bytes, ordinal);
  return bytes;
}

std::uint64_t Gpu::free_bytes(int ordinal) {
  std::size_t free_b = 0, total = 0;
  if (!use(ordinal)) return 0;
  cuMemGetInfo_v2(&free_b, &total);
  return free_b;
}

MappedAllocation& MappedAllocation::operator=(MappedAllocation&& o) noexcept {
  if (this != &o) {
    reset();
    handle_ = std::exchange(o.handle_, 0);
    va_ = std::exchange(o.va_, 0);
    size_ = std::exchange(o.size_, 0);
    device_ = o.device_;
    mapped_ = std::exchange(o.mapped_, false);
  }
  return *this;
}

void MappedAllocation::reset() noexcept {
  if (mapped_) cuMemUnmap(va_, size_);
  if (va_) cuMemAddressFree(va_, size_);
  if (handle_) cuMemRelease(handle_);
  handle_ = 0;
  va_ = 0;
  size_ = 0;
  mapped_ = false;
}

Status MappedAllocation::map(CUmemGenericAllocationHandle handle, std::uint64_t size, int device) {
  handle_ = handle;
  size_ = size;
  device_ = device;
  if (CUresult r = cuMemAddressReserve(&va_, size, 0, 0, 0)) {
    va_ = 0;
    return driver_error("cuMemAddressReserve", r);
  }
  if (CUresult r = cuMemMap(va_, size, 0, handle, 0)) return driver_error("cuMemMap", r);
  mapped_ = true;
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (CUresult r = cuMemSetAccess(va_, size, &access, 1)) return driver_error("cuMemSetAccess", r);
  return ok();
}

Result<MappedAllocation> MappedAllocation::import(int fd, std::uint64_t size) {
  MappedAllocation m;
  CUmemGenericAllocationHandle h = 0;
  void* os = reinterpret_cast<void*>(static_cast<std::intptr_t>(fd));
  if (CUresult r = cuMemImportFromShareableHandle(&h, os, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
    return driver_error("cuMemImportFromShareableHandle", r);
  CUmemAllocationProp prop{};
  int device = 0;
  if (cuMemGetAllocationPropertiesFromHandle(&prop, h) == CUDA_SUCCESS) device = prop.location.id;
  GCR_TRY(Gpu::get());
  if (Status s = m.map(h, size, device); !s) return std::move(s).error();
  return m;
}

Result<MappedAllocation> MappedAllocation::create(std::uint64_t size, int device) {
  MappedAllocation m;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle h = 0;
  if (CUresult r = cuMemCreate(&h, size, &prop, 0)) return driver_error("cuMemCreate", r);
  if (Status s = m.map(h, size, device); !s) return std::move(s).error();
  return m;
}

Result<UniqueFd> MappedAllocation::export_fd() const {
  int fd = -1;
  if (CUresult r =
          cuMemExportToShareableHandle(&fd, handle_, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0))
    return driver_error("cuMemExportToShareableHandle", r);
  return UniqueFd(fd);
}

Status MappedAllocation::read(std::uint64_t offset, std::span<std::byte> out) const {
  if (offset + out.size() > size_)
    return Error{Errc::invalid_argument, "read past the end of an allocation"};
  if (CUresult r = cuMemcpyDtoH_v2(out.data(), va_ + offset, out.size()))
    return driver_error("cuMemcpyDtoH", r);
  return ok();
}

Status MappedAllocation::write(std::uint64_t offset, std::span<const std::byte> in) const {
  if (offset + in.size() > size_)
    return Error{Errc::invalid_argument, "write past the end of an allocation"};
  if (CUresult r = cuMemcpyHtoD_v2(va_ + offset, in.data(), in.size()))
    return driver_error("cuMemcpyHtoD", r);
  return ok();
}

Status MappedAllocation::copy_from(const MappedAllocation& src) const {
  if (src.size_ != size_)
    return Error{Errc::invalid_argument, "device copy between allocations of different sizes"};
  if (CUresult r = cuMemcpyDtoD_v2(va_, src.va_, size_)) return driver_error("cuMemcpyDtoD", r);
  return ok();
}

}  // namespace gcr::gcrd

namespace gcr::gcrd {

namespace {
Error with_hint(Error e, pid_t pid) {
  e.message = "process " + std::to_string(pid) + " was left with its CUDA state checkpointed by " +
              "the CRIU plugin, and putting it back failed: " + e.message +
              "; the process cannot make CUDA calls (restore it from the checkpoint instead)";
  return e;
}
}  // namespace

Result<bool> ensure_cuda_running(pid_t pid) {
  GCR_TRY(Gpu::get());
  CUprocessState state = CU_PROCESS_STATE_RUNNING;
  if (cuCheckpointProcessGetState(pid, &state) != CUDA_SUCCESS) return false;  // not CUDA's
  if (state == CU_PROCESS_STATE_RUNNING) return false;
  if (state == CU_PROCESS_STATE_FAILED)
    return Error{Errc::driver, "the driver reports process " + std::to_string(pid) +
                                   " failed during the checkpoint; it cannot run on"};
  if (state == CU_PROCESS_STATE_CHECKPOINTED)
    if (CUresult r = cuCheckpointProcessRestore(pid, nullptr))
      return with_hint(driver_error("cuCheckpointProcessRestore", r), pid);
  if (CUresult r = cuCheckpointProcessUnlock(pid, nullptr))
    return with_hint(driver_error("cuCheckpointProcessUnlock", r), pid);
  return true;
}

}  // namespace gcr::gcrd
