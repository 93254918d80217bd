// Device memory the cuMemAlloc way (heap), stream-ordered allocation and pools, pinned host
// memory, and pointer attributes.
#include <sys/mman.h>

#include <cstring>

#include "simgpu.h"

using namespace gcr::simgpu;

namespace {

std::mutex g_pool_mu;

CUmemPoolHandle_st* default_pool(int dev) {
  std::lock_guard lock(g_pool_mu);
  Device& d = device(dev);
  if (!d.default_pool) {
    d.default_pool = new CUmemPoolHandle_st;
    d.default_pool->device = dev;
  }
  return d.default_pool;
}

bool valid_pool(CUmemoryPool p) {
  return p && p->magic == 0x504f4f31;
}

CUresult alloc_async(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream h, bool ptsz) {
  SIMGPU_API_BEGIN();
  if (!dptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  if (CUresult r = resolve_stream(h, ptsz, &s)) return r;
  if (!pool) pool = default_pool(s->ctx()->device);
  if (!valid_pool(pool)) return CUDA_ERROR_INVALID_HANDLE;
  DevAddr d;
  // The address is valid from the call on; the memory is simulated as ready at once, which is
  // one valid ordering of the stream-ordered allocator.
  if (CUresult r = heap_alloc(pool->device, bytes, s->ctx(), pool, &d)) return r;
  std::uint64_t used = pool->used += (bytes + kHeapAlign - 1) / kHeapAlign * kHeapAlign;
  for (std::uint64_t h2 = pool->high.load();
       used > h2 && !pool->high.compare_exchange_weak(h2, used);) {
  }
  *dptr = d;
  return CUDA_SUCCESS;
}

CUresult free_async(CUdeviceptr d, CUstream h, bool ptsz) {
  SIMGPU_API_BEGIN();
  Stream* s;
  if (CUresult r = resolve_stream(h, ptsz, &s)) return r;
  {
    std::lock_guard lock(g_mem.mu);
    if (!g_mem.heap_allocs.count(d)) return CUDA_ERROR_INVALID_VALUE;
  }
  enqueue(s, [d] { (void)heap_free(d); });
  return CUDA_SUCCESS;
}

CUresult host_alloc(void** pp, size_t bytes, unsigned flags) {
  if (!pp) return CUDA_ERROR_INVALID_VALUE;
  if (bytes == 0) {
    *pp = nullptr;
    return CUDA_SUCCESS;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard lock(g_mem.mu);
  g_mem.host_allocs[reinterpret_cast<std::uintptr_t>(p)] = {bytes, flags | 0x80000000u};
  *pp = p;
  return CUDA_SUCCESS;
}

// Bit 31 of a host entry's flags marks memory simgpu allocated (freed with cuMemFreeHost), as
// opposed to memory the program registered (released with cuMemHostUnregister).
constexpr unsigned kOwnedHost = 0x80000000u;

}  // namespace

extern "C" {

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  SIMGPU_API_BEGIN();
  if (!dptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx;
  if (CUresult r = require_context(&ctx)) return r;
  DevAddr d;
  if (CUresult r = heap_alloc(ctx->device, bytes, ctx, nullptr, &d)) return r;
  *dptr = d;
  return CUDA_SUCCESS;
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                            unsigned int elementSize) {
  SIMGPU_API_BEGIN();
  if (!dptr || !pitch || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (elementSize != 4 && elementSize != 8 && elementSize != 16) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx;
  if (CUresult r = require_context(&ctx)) return r;
  std::size_t p = (width + kHeapAlign - 1) / kHeapAlign * kHeapAlign;
  DevAddr d;
  if (CUresult r = heap_alloc(ctx->device, p * height, ctx, nullptr, &d)) return r;
  *dptr = d;
  *pitch = p;
  return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr d) {
  SIMGPU_API_BEGIN();
  if (d == 0) return CUDA_SUCCESS;
  CUctx_st* owner = nullptr;
  {
    std::lock_guard lock(g_mem.mu);
    auto it = g_mem.heap_allocs.find(d);
    if (it == g_mem.heap_allocs.end()) return CUDA_ERROR_INVALID_VALUE;
    owner = it->second.ctx;
  }
  // cuMemFree synchronizes: work already queued may still use the memory.
  if (owner && valid_context(owner)) {
    OutsideGate wait;
    drain_context(owner);
  }
  return heap_free(d);
}

CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  SIMGPU_API_BEGIN();
  if (!free_bytes || !total) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx;
  if (CUresult r = require_context(&ctx)) return r;
  *total = config().memory_bytes;
  *free_bytes = *total - device(ctx->device).used_bytes.load();
  return CUDA_SUCCESS;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr d) {
  SIMGPU_API_BEGIN();
  DeviceRange r;
  if (!find_device_range(d, 1, &r)) return CUDA_ERROR_NOT_FOUND;
  if (base) *base = r.start;
  if (size) *size = r.size;
  return CUDA_SUCCESS;
}

CUresult cuMemAllocHost_v2(void** pp, size_t bytes) {
  SIMGPU_API_BEGIN();
  return host_alloc(pp, bytes, 0);
}

CUresult cuMemHostAlloc(void** pp, size_t bytes, unsigned int flags) {
  SIMGPU_API_BEGIN();
  if (flags &
      ~(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED))
    return CUDA_ERROR_INVALID_VALUE;
  return host_alloc(pp, bytes, flags);
}

CUresult cuMemFreeHost(void* p) {
  SIMGPU_API_BEGIN();
  std::lock_guard lock(g_mem.mu);
  auto it = g_mem.host_allocs.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == g_mem.host_allocs.end() || !(it->second.second & kOwnedHost))
    return CUDA_ERROR_INVALID_VALUE;
  munmap(p, it->second.first);
  g_mem.host_allocs.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemHostRegister_v2(void* p, size_t bytes, unsigned int flags) {
  SIMGPU_API_BEGIN();
  if (!p || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g_mem.mu);
  auto a = reinterpret_cast<std::uintptr_t>(p);
  auto it = g_mem.host_allocs.upper_bound(a + bytes - 1);
  if (it != g_mem.host_allocs.begin() && std::prev(it)->first + std::prev(it)->second.first > a)
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  g_mem.host_allocs[a] = {bytes, flags & ~kOwnedHost};
  return CUDA_SUCCESS;
}

CUresult cuMemHostUnregister(void* p) {
  SIMGPU_API_BEGIN();
  std::lock_guard lock(g_mem.mu);
  auto it = g_mem.host_allocs.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == g_mem.host_allocs.end() || (it->second.second & kOwnedHost))
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  g_mem.host_allocs.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemHostGetFlags(unsigned int* flags, void* p) {
  SIMGPU_API_BEGIN();
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g_mem.mu);
  auto a = reinterpret_cast<std::uintptr_t>(p);
  auto it = g_mem.host_allocs.upper_bound(a);
  if (it == g_mem.host_allocs.begin() || a >= std::prev(it)->first + std::prev(it)->second.first)
    return CUDA_ERROR_INVALID_VALUE;
  *flags = std::prev(it)->second.second & ~kOwnedHost;
  return CUDA_SUCCESS;
}

// Unified addressing: pinned host memory is reached by the device at its host address.
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int flags) {
  SIMGPU_API_BEGIN();
  if (!pdptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!is_pinned_host(p, 1)) return CUDA_ERROR_INVALID_VALUE;
  *pdptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

CUresult cuMemAllocManaged(CUdeviceptr*, size_t, unsigned int) {
  SIMGPU_API_BEGIN();
  log_once("managed", "cuMemAllocManaged: managed (unified) memory is not simulated");
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream h) {
  return alloc_async(dptr, bytes, nullptr, h, false);
}
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream h) {
  return alloc_async(dptr, bytes, nullptr, h, true);
}
CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream h) {
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  return alloc_async(dptr, bytes, pool, h, false);
}
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                      CUstream h) {
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  return alloc_async(dptr, bytes, pool, h, true);
}
CUresult cuMemFreeAsync(CUdeviceptr d, CUstream h) {
  return free_async(d, h, false);
}
CUresult cuMemFreeAsync_ptsz(CUdeviceptr d, CUstream h) {
  return free_async(d, h, true);
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  SIMGPU_API_BEGIN();
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pool = default_pool(dev);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  return cuDeviceGetDefaultMemPool(pool, dev);
}

CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  SIMGPU_API_BEGIN();
  if (!pool || !props) return CUDA_ERROR_INVALID_VALUE;
  if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_device(props->location.id))
    return CUDA_ERROR_INVALID_VALUE;
  auto* p = new CUmemPoolHandle_st;
  p->device = props->location.id;
  *pool = p;
  return CUDA_SUCCESS;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  SIMGPU_API_BEGIN();
  if (!valid_pool(pool) || pool == device(pool->device).default_pool)
    return CUDA_ERROR_INVALID_VALUE;
  pool->magic = 0;  // outstanding allocations keep a pointer to it: leave the object
  return CUDA_SUCCESS;
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  SIMGPU_API_BEGIN();
  if (!valid_pool(pool) || !value) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      pool->release_threshold = *static_cast<cuuint64_t*>(value);
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      pool->high = pool->used.load();
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  SIMGPU_API_BEGIN();
  if (!valid_pool(pool) || !value) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *static_cast<cuuint64_t*>(value) = pool->release_threshold;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      *static_cast<cuuint64_t*>(value) = pool->used.load();
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      *static_cast<cuuint64_t*>(value) = pool->high.load();
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      *static_cast<int*>(value) = 1;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t) {
  SIMGPU_API_BEGIN();
  return valid_pool(pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr ptr) {
  SIMGPU_API_BEGIN();
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  DeviceRange r;
  bool dev = find_device_range(ptr, 1, &r);
  bool host = !dev && is_pinned_host(reinterpret_cast<void*>(ptr), 1);
  if (!dev && !host) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = dev && r.heap ? r.heap->ctx : current_context();
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *static_cast<CUcontext*>(data) = ctx;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) = dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      *static_cast<CUdeviceptr*>(data) = ptr;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (dev) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(data) = reinterpret_cast<void*>(ptr);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
      *static_cast<int*>(data) = 1;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      *static_cast<unsigned long long*>(data) =
          dev && r.heap ? r.heap->buffer_id : (dev ? r.mapping->phys->id : 0);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<int*>(data) = 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = dev ? r.device : (ctx ? ctx->device : 0);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:  // cuMemAlloc memory, not pools
      *static_cast<int*>(data) = dev && r.heap && !r.heap->pool;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = dev ? r.start : ptr;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *static_cast<size_t*>(data) = dev ? r.size : 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
      *static_cast<int*>(data) = 1;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
      *static_cast<unsigned long long*>(data) =
          dev && r.mapping ? r.mapping->phys->handle_types : 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
      *static_cast<int*>(data) = 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
      *static_cast<int*>(data) = dev && r.mapping ? static_cast<int>(r.mapping->access)
                                                  : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      *static_cast<CUmemoryPool*>(data) = dev && r.heap ? r.heap->pool : nullptr;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
      *static_cast<size_t*>(data) = dev ? r.size : 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
      *static_cast<void**>(data) = reinterpret_cast<void*>(dev ? r.start : ptr);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      *static_cast<unsigned long long*>(data) =
          dev && r.mapping ? r.mapping->phys->id : (dev ? r.heap->buffer_id : 0);
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// As documented: an attribute of a pointer the driver does not know is reported as
// zero/unregistered rather than failing the whole query.
CUresult cuPointerGetAttributes(unsigned int count, CUpointer_attribute* attrs, void** data,
                                CUdeviceptr ptr) {
  if (!attrs || !data) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < count; ++i) {
    CUresult r = cuPointerGetAttribute(data[i], attrs[i], ptr);
    if (r == CUDA_ERROR_NOT_INITIALIZED) return r;
    if (r != CUDA_SUCCESS && data[i]) {
      std::size_t bytes = attrs[i] == CU_POINTER_ATTRIBUTE_CONTEXT ||
                                  attrs[i] == CU_POINTER_ATTRIBUTE_HOST_POINTER ||
                                  attrs[i] == CU_POINTER_ATTRIBUTE_DEVICE_POINTER ||
                                  attrs[i] == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
                                  attrs[i] == CU_POINTER_ATTRIBUTE_RANGE_SIZE ||
                                  attrs[i] == CU_POINTER_ATTRIBUTE_BUFFER_ID ||
                                  attrs[i] == CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE
                              ? 8
                              : 4;
      std::memset(data[i], 0, bytes);
    }
  }
  return CUDA_SUCCESS;
}

}  // extern "C"
