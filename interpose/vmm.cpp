// The program's own VMM calls, on gcr's virtual allocation handles (Note [Virtual allocation
// handles] in vmm_handles.h): every call that takes or gives an allocation handle, and the device
// attributes that steer programs away from what gcr refuses (FABRIC handles, multicast, pool IPC).
#include <cstdio>
#include <mutex>
#include <vector>

#include "alloc.h"
#include "gate.h"
#include "real_driver.h"
#include "regions.h"
#include "vmm_handles.h"

namespace gcr::interpose {
namespace {

// The region holding addr, or null (g_region_mu held).
const Region* region_at(std::uint64_t addr) GCR_REQUIRES(g_region_mu) {
  for (std::uint32_t id : live_region_ids()) {
    const Region& r = g_regions[id];
    if (addr - r.address < r.size) return &r;
  }
  return nullptr;
}

// Logged once per kind of refusal: each call site passes its own flag.
void note_refused(std::once_flag& once, const char* what) {
  std::call_once(once, [what] {
    std::fprintf(stderr,
                 "gcr: %s is not supported under gcr (memory gcr cannot checkpoint); the program "
                 "is told CUDA_ERROR_NOT_SUPPORTED and may fall back\n",
                 what);
  });
}

CUresult map_array_async(CUarrayMapInfo* infos, unsigned count, CUstream stream,
                         decltype(&::cuMemMapArrayAsync) forward) {
  if (g_unmanaged || !infos) return forward(infos, count, stream);
  GateScope gate;
  std::vector<CUarrayMapInfo> real_infos(infos, infos + count);
  {
    MutexLock lock(g_region_mu);
    for (CUarrayMapInfo& info : real_infos) {
      if (info.memHandleType != CU_MEM_HANDLE_TYPE_GENERIC ||
          !is_virtual_handle(info.memHandle.memHandle))
        continue;
      const VirtualAllocation* v = valloc_find(info.memHandle.memHandle);
      if (!v) return CUDA_ERROR_INVALID_VALUE;
      info.memHandle.memHandle = v->real;
    }
  }
  return forward(real_infos.data(), count, stream);
}

}  // namespace

extern "C" {

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                     const CUmemAllocationProp* prop, unsigned long long flags) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged || !handle || !prop) return real->cuMemCreate(handle, size, prop, flags);
  GateScope gate;
  if (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_FABRIC) {
    static std::once_flag once;
    note_refused(once, "cuMemCreate with a FABRIC handle type");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) {
    if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE) {
      static std::once_flag once;
      note_refused(once,
                   "exportable host memory (cuMemCreate at a host location with a handle type)");
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    return real->cuMemCreate(handle, size, prop, flags);
  }
  // gcr parks memory by exporting it: every device allocation must be exportable as an fd.
  CUmemAllocationProp p = *prop;
  p.requestedHandleTypes = static_cast<CUmemAllocationHandleType>(
      p.requestedHandleTypes | CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  CUmemGenericAllocationHandle h = 0;
  CUresult r = real->cuMemCreate(&h, size, &p, flags);
  if (r == CUDA_ERROR_NOT_SUPPORTED || r == CUDA_ERROR_INVALID_VALUE)
    r = real->cuMemCreate(&h, size, prop, flags);
  if (r != CUDA_SUCCESS) return r;
  MutexLock lock(g_region_mu);
  *handle = valloc_add(h, size, *prop, AllocationOrigin::created);
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged || !is_virtual_handle(handle)) return real->cuMemRelease(handle);
  GateScope gate;
  MutexLock lock(g_region_mu);
  VirtualAllocation* v = valloc_find(handle);
  if (!v || v->program_refs == 0) return CUDA_ERROR_INVALID_VALUE;
  --v->program_refs;
  valloc_release_if_unused(valloc_id(handle));
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real->cuMemMap(ptr, size, offset, handle, flags);
  // A region mapped while parked would be one that unpark was not given: wait at the gate.
  GateScope gate;
  MutexLock lock(g_region_mu);
  if (is_virtual_handle(handle)) {
    VirtualAllocation* v = valloc_find(handle);
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = real->cuMemMap(ptr, size, offset, v->real, flags)) return r;
    std::uint32_t id = register_user_region(
        ptr, size, offset, static_cast<std::uint32_t>(v->prop.location.id), valloc_id(handle));
    if (!id) {
      real->cuMemUnmap(ptr, size);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (v->exported || v->origin == AllocationOrigin::imported) mark_region_shared(id);
    ++v->mappings;
    return CUDA_SUCCESS;
  }
  if (CUresult r = real->cuMemMap(ptr, size, offset, handle, flags)) return r;
  CUmemAllocationProp prop{};
  std::uint32_t device = 0;
  if (real->cuMemGetAllocationPropertiesFromHandle(&prop, handle) == CUDA_SUCCESS)
    device = static_cast<std::uint32_t>(prop.location.id);
  register_user_region(ptr, size, offset, device, 0);
  return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real->cuMemUnmap(ptr, size);
  GateScope gate;
  MutexLock lock(g_region_mu);
  if (CUresult r = real->cuMemUnmap(ptr, size)) return r;
  for (std::uint32_t id : unregister_user_regions(ptr, size)) {
    if (VirtualAllocation* v = valloc_by_id(id); v && v->mappings) --v->mappings;
    valloc_release_if_unused(id);
  }
  return CUDA_SUCCESS;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged || !handle) return real->cuMemRetainAllocationHandle(handle, addr);
  GateScope gate;
  MutexLock lock(g_region_mu);
  const Region* r = region_at(reinterpret_cast<std::uint64_t>(addr));
  if (r && r->kind == RegionKind::user && r->allocation) {
    VirtualAllocation* v = valloc_by_id(r->allocation);
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    ++v->program_refs;
    *handle = valloc_handle(r->allocation);
    return CUDA_SUCCESS;
  }
  // cuMemAlloc memory: no handle, as for memory cuMemMap did not map.
  if (r && r->kind != RegionKind::user) return CUDA_ERROR_INVALID_VALUE;
  return real->cuMemRetainAllocationHandle(handle, addr);
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                CUmemGenericAllocationHandle handle) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged || !is_virtual_handle(handle))
    return real->cuMemGetAllocationPropertiesFromHandle(prop, handle);
  GateScope gate;
  MutexLock lock(g_region_mu);
  const VirtualAllocation* v = valloc_find(handle);
  if (!v || !prop) return CUDA_ERROR_INVALID_VALUE;
  *prop = v->prop;  // what the program asked for, without the handle type gcr added
  return CUDA_SUCCESS;
}

CUresult cuMemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType type, unsigned long long flags) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged || !is_virtual_handle(handle))
    return real->cuMemExportToShareableHandle(shareable, handle, type, flags);
  GateScope gate;
  MutexLock lock(g_region_mu);
  VirtualAllocation* v = valloc_find(handle);
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  if (!(v->prop.requestedHandleTypes & type)) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = real->cuMemExportToShareableHandle(shareable, v->real, type, flags);
  if (r != CUDA_SUCCESS) return r;
  v->exported = true;
  if (type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR && shareable)
    add_share_key(v->share_keys, share_key_of_fd(*static_cast<int*>(shareable)));
  valloc_mark_shared(valloc_id(handle));
  return r;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* os_handle,
                                        CUmemAllocationHandleType type) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged || !handle) return real->cuMemImportFromShareableHandle(handle, os_handle, type);
  GateScope gate;
  CUmemGenericAllocationHandle h = 0;
  if (CUresult r = real->cuMemImportFromShareableHandle(&h, os_handle, type)) return r;
  CUmemAllocationProp prop{};
  (void)real->cuMemGetAllocationPropertiesFromHandle(&prop, h);
  MutexLock lock(g_region_mu);
  *handle = valloc_add(h, 0, prop, AllocationOrigin::imported);
  if (type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    add_share_key(valloc_find(*handle)->share_keys,
                  share_key_of_fd(static_cast<int>(reinterpret_cast<std::intptr_t>(os_handle))));
  return CUDA_SUCCESS;
}

CUresult cuMemMapArrayAsync(CUarrayMapInfo* infos, unsigned int count, CUstream stream) {
  static const auto real = real_fn<decltype(&::cuMemMapArrayAsync)>("cuMemMapArrayAsync");
  return map_array_async(infos, count, stream, real);
}

CUresult cuMemMapArrayAsync_ptsz(CUarrayMapInfo* infos, unsigned int count, CUstream stream) {
  static const auto real = real_fn<decltype(&::cuMemMapArrayAsync)>("cuMemMapArrayAsync_ptsz");
  return map_array_async(infos, count, stream, real);
}

CUresult cuMulticastCreate(CUmemGenericAllocationHandle*, const CUmulticastObjectProp*) {
  static std::once_flag once;
  note_refused(once, "multicast (cuMulticastCreate)");
  return CUDA_ERROR_NOT_SUPPORTED;
}

// What gcr refuses reads as absent, so that programs choose what it supports.
CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  static const auto real = real_fn<decltype(&::cuDeviceGetAttribute)>("cuDeviceGetAttribute");
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real(value, attribute, device);
  GateScope gate;
  CUresult r = real(value, attribute, device);
  if (r == CUDA_SUCCESS && value &&
      (attribute == CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED ||
       attribute == CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED ||
       attribute == CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES))
    *value = 0;
  return r;
}

}  // extern "C"
}  // namespace gcr::interpose
