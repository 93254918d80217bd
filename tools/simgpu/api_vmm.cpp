// Virtual memory management: address reservations, physical allocations (memfds), mapping,
// access, and sharing allocations with other processes as POSIX file descriptors.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstring>

#include "simgpu.h"

using namespace gcr::simgpu;
using gcr::UniqueFd;

namespace {

bool aligned(std::uint64_t v) {
  return v % kGranularity == 0;
}

// The physical GPU of an imported memfd is in its name ("simgpu-dev<N>"), which /proc shows;
// answered as this process's ordinal for that GPU.
int device_of_memfd(int fd) {
  char link[64], target[256];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, target, sizeof target - 1);
  if (n <= 0) return -1;
  target[n] = 0;
  const char* tag = std::strstr(target, "simgpu-dev");
  return tag ? ordinal_of_physical(std::atoi(tag + 10)) : -1;
}

void release_phys_locked(std::shared_ptr<PhysAlloc> p) {
  // Called with g_mem.mu held, when neither a handle nor a mapping refers to p any more.
  if (!p->imported) uncharge_device(p->device, p->size);
  std::erase(g_mem.orphans, p);
}

}  // namespace

extern "C" {

CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags option) {
  SIMGPU_API_BEGIN();
  if (!granularity || !prop) return CUDA_ERROR_INVALID_VALUE;
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_device(prop->location.id))
    return CUDA_ERROR_INVALID_DEVICE;
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  SIMGPU_API_BEGIN();
  if (!ptr || size == 0 || !aligned(size) || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (alignment == 0) alignment = kGranularity;
  if (alignment % kGranularity != 0 || (alignment & (alignment - 1)))
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g_mem.mu);
  DevAddr got;
  // The address asked for is a hint, honoured when that range is free, as the driver does.
  if (!take_va(size, alignment, addr && addr % alignment == 0 ? addr : 0, &got))
    return CUDA_ERROR_OUT_OF_MEMORY;
  g_mem.reservations[got] = VaReservation{got, size};
  *ptr = got;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  SIMGPU_API_BEGIN();
  std::lock_guard lock(g_mem.mu);
  auto it = g_mem.reservations.find(ptr);
  if (it == g_mem.reservations.end() || it->second.size != size) return CUDA_ERROR_INVALID_VALUE;
  auto m = g_mem.mappings.lower_bound(ptr);
  if (m != g_mem.mappings.end() && m->first < ptr + size)
    return CUDA_ERROR_INVALID_VALUE;  // still mapped
  g_mem.reservations.erase(it);
  give_va(ptr, size);
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                     const CUmemAllocationProp* prop, unsigned long long flags) {
  SIMGPU_API_BEGIN();
  if (!handle || !prop || size == 0 || !aligned(size) || flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
  unsigned types = prop->requestedHandleTypes;
  if (types & ~CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    log_once("handle-types", "cuMemCreate: only POSIX file descriptor handles are simulated");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  int dev = prop->location.id;
  if (CUresult r = charge_device(dev, size)) return r;
  // Named by physical GPU: another process (which may see it under another ordinal) reads it.
  std::string name = "simgpu-dev" + std::to_string(physical_device(dev));
  auto p = std::make_shared<PhysAlloc>();
  p->fd = make_memfd(name.c_str(), size);
  // A real allocation's exported handle cannot be resized; a memfd can: sealed, so that an importer
  // (gcrd) can trust its size whoever else holds the fd.
  if (p->fd && !seal_size(p->fd.get())) p->fd.reset();
  if (!p->fd) {
    uncharge_device(dev, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  p->size = size;
  p->device = dev;
  p->handle_types = types;
  std::lock_guard lock(g_mem.mu);
  p->id = g_mem.next_id++;
  g_mem.phys[p->id] = p;
  *handle = p->id;
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  SIMGPU_API_BEGIN();
  std::lock_guard lock(g_mem.mu);
  auto it = g_mem.phys.find(handle);
  if (it == g_mem.phys.end()) return CUDA_ERROR_INVALID_VALUE;
  auto p = it->second;
  if (--p->handle_refs > 0) return CUDA_SUCCESS;
  g_mem.phys.erase(it);
  // Memory still mapped stays alive until its last unmap, as documented.
  if (p->mappings > 0)
    g_mem.orphans.push_back(p);
  else
    release_phys_locked(p);
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  SIMGPU_API_BEGIN();
  if (size == 0 || !aligned(ptr) || !aligned(size) || !aligned(offset) || flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g_mem.mu);
  auto it = g_mem.phys.find(handle);
  if (it == g_mem.phys.end()) return CUDA_ERROR_INVALID_HANDLE;
  auto p = it->second;
  if (offset + size > p->size) return CUDA_ERROR_INVALID_VALUE;
  auto r = g_mem.reservations.upper_bound(ptr);
  if (r == g_mem.reservations.begin()) return CUDA_ERROR_INVALID_VALUE;
  --r;
  if (ptr + size > r->second.addr + r->second.size) return CUDA_ERROR_INVALID_VALUE;
  auto m = g_mem.mappings.lower_bound(ptr);
  if (m != g_mem.mappings.end() && m->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;
  if (m != g_mem.mappings.begin() && std::prev(m)->first + std::prev(m)->second.size > ptr)
    return CUDA_ERROR_INVALID_VALUE;
  // Mapped but not yet accessible: the device may touch it only after cuMemSetAccess.
  if (!map_alias(ptr, size, p->fd.get(), offset, PROT_NONE)) return CUDA_ERROR_OUT_OF_MEMORY;
  g_mem.mappings[ptr] = VmmMapping{ptr, size, p, offset, 0};
  ++p->mappings;
  return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  SIMGPU_API_BEGIN();
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  // Unmap does not wait for the device: drain first, so no queued work reads unmapped memory.
  {
    OutsideGate wait;
    drain_all_streams();
  }
  std::lock_guard lock(g_mem.mu);
  auto first = g_mem.mappings.lower_bound(ptr);
  if (first == g_mem.mappings.end() || first->first != ptr) return CUDA_ERROR_INVALID_VALUE;
  auto last = first;
  DevAddr end = ptr;
  while (last != g_mem.mappings.end() && last->first == end && end < ptr + size) {
    end += last->second.size;
    ++last;
  }
  if (end != ptr + size) return CUDA_ERROR_INVALID_VALUE;  // must cover whole mappings exactly
  for (auto it = first; it != last; ++it)
    if (it->second.phys->ipc) return CUDA_ERROR_INVALID_VALUE;  // cuIpcCloseMemHandle's to undo
  for (auto it = first; it != last;) {
    auto p = it->second.phys;
    unmap_alias(it->first, it->second.size);
    it = g_mem.mappings.erase(it);
    if (--p->mappings == 0 && p->handle_refs <= 0) release_phys_locked(p);
  }
  return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  SIMGPU_API_BEGIN();
  if (!desc || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  unsigned access = 0;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_device(desc[i].location.id))
      return CUDA_ERROR_INVALID_DEVICE;
    if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
        desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      return CUDA_ERROR_INVALID_VALUE;
    access |= desc[i].flags;  // all simulated devices share one view of memory
  }
  std::lock_guard lock(g_mem.mu);
  DevAddr end = ptr;
  auto it = g_mem.mappings.find(ptr);
  if (it == g_mem.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
  for (auto m = it; m != g_mem.mappings.end() && m->first == end && end < ptr + size; ++m)
    end += m->second.size;
  if (end < ptr + size) return CUDA_ERROR_INVALID_VALUE;
  for (auto m = it; m != g_mem.mappings.end() && m->first < ptr + size; ++m)
    if (m->second.phys->ipc) return CUDA_ERROR_INVALID_VALUE;
  for (auto m = it; m != g_mem.mappings.end() && m->first < ptr + size; ++m) {
    if (!map_alias(m->first, m->second.size, m->second.phys->fd.get(), m->second.offset,
                   prot_of(access)))
      return CUDA_ERROR_OUT_OF_MEMORY;
    m->second.access = access;
  }
  return CUDA_SUCCESS;
}

CUresult cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  SIMGPU_API_BEGIN();
  if (!flags || !location) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g_mem.mu);
  auto it = g_mem.mappings.upper_bound(ptr);
  if (it == g_mem.mappings.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (ptr >= it->first + it->second.size) return CUDA_ERROR_INVALID_VALUE;
  *flags = it->second.access;
  return CUDA_SUCCESS;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  SIMGPU_API_BEGIN();
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  auto d = reinterpret_cast<DevAddr>(addr);
  std::lock_guard lock(g_mem.mu);
  auto it = g_mem.mappings.upper_bound(d);
  if (it == g_mem.mappings.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (d >= it->first + it->second.size) return CUDA_ERROR_INVALID_VALUE;
  auto p = it->second.phys;
  if (p->ipc) return CUDA_ERROR_INVALID_VALUE;  // IPC memory has no allocation handle
  if (p->handle_refs <= 0) {  // released but mapped: the handle comes back to life
    std::erase(g_mem.orphans, p);
    p->handle_refs = 0;
    g_mem.phys[p->id] = p;
  }
  ++p->handle_refs;
  *handle = p->id;
  return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                CUmemGenericAllocationHandle handle) {
  SIMGPU_API_BEGIN();
  if (!prop) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g_mem.mu);
  auto it = g_mem.phys.find(handle);
  if (it == g_mem.phys.end()) return CUDA_ERROR_INVALID_VALUE;
  std::memset(prop, 0, sizeof *prop);
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = it->second->device;
  prop->requestedHandleTypes = static_cast<CUmemAllocationHandleType>(it->second->handle_types);
  return CUDA_SUCCESS;
}

CUresult cuMemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType type, unsigned long long flags) {
  SIMGPU_API_BEGIN();
  if (!shareable || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  std::lock_guard lock(g_mem.mu);
  auto it = g_mem.phys.find(handle);
  if (it == g_mem.phys.end()) return CUDA_ERROR_INVALID_VALUE;
  if (!(it->second->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
    return CUDA_ERROR_INVALID_VALUE;
  // A new descriptor of the caller's to own (and close), as the driver hands out.
  int fd = fcntl(it->second->fd.get(), F_DUPFD_CLOEXEC, 3);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  it->second->exported = true;
  *static_cast<int*>(shareable) = fd;
  return CUDA_SUCCESS;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* os_handle,
                                        CUmemAllocationHandleType type) {
  SIMGPU_API_BEGIN();
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  int theirs = static_cast<int>(reinterpret_cast<std::intptr_t>(os_handle));
  struct stat st;
  if (theirs < 0 || fstat(theirs, &st) != 0 || st.st_size <= 0 || !aligned(st.st_size))
    return CUDA_ERROR_INVALID_VALUE;
  // Only what cuMemCreate made: its size is sealed, so a mapping of it can never fault.
  int seals = fcntl(theirs, F_GET_SEALS);
  if (seals < 0 || (seals & kSizeSeals) != kSizeSeals) return CUDA_ERROR_INVALID_VALUE;
  int dev = device_of_memfd(theirs);
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_VALUE;  // not a simgpu allocation
  int fd = fcntl(theirs, F_DUPFD_CLOEXEC, 3);  // the caller keeps (and closes) its own fd
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  auto p = std::make_shared<PhysAlloc>();
  p->fd = UniqueFd(fd);
  p->size = static_cast<std::uint64_t>(st.st_size);
  p->device = dev;
  p->handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  p->imported = true;
  std::lock_guard lock(g_mem.mu);
  p->id = g_mem.next_id++;
  g_mem.phys[p->id] = p;
  *handle = p->id;
  return CUDA_SUCCESS;
}

}  // extern "C"
