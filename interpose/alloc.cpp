// cuMemAlloc and friends: every allocation path of the program lands in regions, small ones in
// shared slabs (Note [Regions and slabs]). Also the program's address reservations, and the
// queries whose answers must describe gcr's sub-allocations rather than the slab behind them. The
// program's own allocation handles are in vmm.cpp.
#include "alloc.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "agent_ops.h"
#include "config.h"
#include "gate.h"
#include "real_driver.h"
#include "regions.h"

namespace gcr::interpose {

bool g_unmanaged = false;

namespace {

constexpr std::uint64_t kAlign = 512;

struct Allocation {
  std::uint64_t size = 0;  // rounded
  std::uint64_t requested = 0;
  std::uint32_t region = 0;
  bool slab = false;
};

struct Slab {
  std::uint32_t region = 0;
  std::uint32_t device = 0;
  std::map<std::uint64_t, std::uint64_t> free;  // offset -> bytes
  std::uint64_t used = 0;
};

std::map<CUdeviceptr, Allocation> g_allocs;
std::map<std::uint32_t, Slab> g_slabs;  // by region id
std::uint64_t g_requested = 0;
struct PendingFree {
  CUevent event;
  CUdeviceptr address;
};
std::vector<PendingFree> g_pending;
std::set<CUdeviceptr> g_user_reservations;
std::map<CUmemoryPool, std::uint32_t>
    g_pool_devices;  // the device of each pool the program has seen

std::uint64_t round_up(std::uint64_t v, std::uint64_t a) {
  return (v + a - 1) / a * a;
}

bool slab_take(Slab& s, std::uint64_t size, std::uint64_t* offset) {
  for (auto it = s.free.begin(); it != s.free.end(); ++it) {
    if (it->second < size) continue;
    *offset = it->first;
    std::uint64_t rest = it->second - size;
    std::uint64_t at = it->first + size;
    s.free.erase(it);
    if (rest) s.free[at] = rest;
    s.used += size;
    return true;
  }
  return false;
}

void slab_give(Slab& s, std::uint64_t offset, std::uint64_t size) {
  auto [it, inserted] = s.free.emplace(offset, size);
  s.used -= size;
  if (auto next = std::next(it); next != s.free.end() && offset + size == next->first) {
    it->second += next->second;
    s.free.erase(next);
  }
  if (it != s.free.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      s.free.erase(it);
    }
  }
}

CUresult current_device(CUdevice* dev) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUcontext ctx = nullptr;
  if (CUresult r = real->cuCtxGetCurrent(&ctx)) return r;
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  note_context(ctx);
  return real->cuCtxGetDevice(dev);
}

// The device a stream-ordered allocation on `stream` comes from: the stream's (its context's),
// which need not be the current context's.
CUresult stream_device(CUstream stream, bool ptsz, CUdevice* dev) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  static const auto get_ctx_ptsz = real_fn<decltype(&::cuStreamGetCtx)>("cuStreamGetCtx_ptsz");
  CUcontext ctx = nullptr;
  if ((ptsz ? get_ctx_ptsz : real->cuStreamGetCtx)(stream, &ctx) != CUDA_SUCCESS || !ctx)
    return current_device(dev);
  note_context(ctx);
  if (CUresult r = real->cuCtxPushCurrent_v2(ctx)) return r;
  CUresult r = real->cuCtxGetDevice(dev);
  CUcontext popped;
  real->cuCtxPopCurrent_v2(&popped);
  return r;
}

bool stream_capturing(CUstream stream, bool ptsz) {
  const RealDriver* real = real_driver();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  auto fn = ptsz ? real->cuStreamIsCapturing_ptsz : real->cuStreamIsCapturing;
  return fn && fn(stream, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

}  // namespace

CUresult alloc_device(std::uint64_t bytes, std::uint32_t device, bool async, CUdeviceptr* out) {
  std::uint64_t size = round_up(bytes, kAlign);
  if (size <= config().small_bytes) {
    for (auto& [id, s] : g_slabs) {
      std::uint64_t off;
      if (s.device == device && slab_take(s, size, &off)) {
        *out = g_regions[id].address + off;
        g_allocs[*out] = Allocation{size, bytes, id, true};
        g_requested += bytes;
        return CUDA_SUCCESS;
      }
    }
    std::uint32_t id;
    if (CUresult r = create_region(kGranule, device, RegionKind::slab, &id)) return r;
    Slab& s = g_slabs[id];
    s.region = id;
    s.device = device;
    s.free[0] = kGranule;
    std::uint64_t off = 0;
    slab_take(s, size, &off);
    *out = g_regions[id].address + off;
    g_allocs[*out] = Allocation{size, bytes, id, true};
    g_requested += bytes;
    return CUDA_SUCCESS;
  }
  std::uint32_t id;
  if (CUresult r = create_region(round_up(bytes, kGranule), device, RegionKind::large, &id))
    return r;
  *out = g_regions[id].address;
  g_allocs[*out] = Allocation{g_regions[id].size, bytes, id, false};
  g_requested += bytes;
  (void)async;
  return CUDA_SUCCESS;
}

bool free_device(CUdeviceptr address) {
  auto it = g_allocs.find(address);
  if (it == g_allocs.end()) return false;
  Allocation a = it->second;
  g_allocs.erase(it);
  g_requested -= a.requested;
  if (a.slab) {
    Slab& s = g_slabs[a.region];
    slab_give(s, address - g_regions[a.region].address, a.size);
    if (s.used == 0) {
      destroy_region(a.region);
      g_slabs.erase(a.region);
    }
  } else {
    destroy_region(a.region);
  }
  return true;
}

bool owns_allocation(CUdeviceptr address) {
  return g_allocs.count(address) != 0;
}

bool find_allocation(CUdeviceptr address, CUdeviceptr* base, std::uint64_t* size) {
  auto it = g_allocs.upper_bound(address);
  if (it == g_allocs.begin()) return false;
  --it;
  if (address >= it->first + it->second.requested &&
      !(it->second.requested == 0 && address == it->first))
    return false;
  *base = it->first;
  *size = it->second.requested;
  return true;
}

void reap_async_frees(bool all) {
  const RealDriver* real = real_driver();
  std::vector<PendingFree> keep;
  for (PendingFree& p : g_pending) {
    if (all || real->cuEventQuery(p.event) == CUDA_SUCCESS) {
      free_device(p.address);
      real->cuEventDestroy_v2(p.event);
    } else {
      keep.push_back(p);
    }
  }
  g_pending.swap(keep);
}

std::uint64_t requested_bytes() {
  return g_requested;
}

}  // namespace gcr::interpose

using namespace gcr::interpose;

namespace {

CUresult alloc_sync(CUdeviceptr* dptr, std::uint64_t bytes) {
  if (!dptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  CUdevice dev;
  if (CUresult r = current_device(&dev)) return r;
  MutexLock lock(g_region_mu);
  reap_async_frees(false);
  return alloc_device(bytes, static_cast<std::uint32_t>(dev), false, dptr);
}

// From `pool` (null: the stream's device's current pool). The memory is on the pool's device when
// gcr has seen where the pool lives, else on the stream's.
CUresult alloc_async(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream stream, bool ptsz,
                     CUresult (*forward)(CUdeviceptr*, size_t, CUstream)) {
  // Allocations recorded into a CUDA graph become graph nodes the driver owns: leave them to it.
  if (stream_capturing(stream, ptsz)) return forward(dptr, bytes, stream);
  if (!dptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  CUdevice dev;
  if (CUresult r = stream_device(stream, ptsz, &dev)) return r;
  MutexLock lock(g_region_mu);
  if (auto it = g_pool_devices.find(pool); pool && it != g_pool_devices.end())
    dev = static_cast<CUdevice>(it->second);
  reap_async_frees(false);
  // Ready at once: a valid ordering of the stream-ordered allocator.
  return alloc_device(bytes, static_cast<std::uint32_t>(dev), true, dptr);
}

void note_pool(CUmemoryPool pool, int device) {
  if (!pool) return;
  MutexLock lock(g_region_mu);
  g_pool_devices[pool] = static_cast<std::uint32_t>(device);
}

CUresult free_async(CUdeviceptr dptr, CUstream stream, bool ptsz,
                    CUresult (*forward)(CUdeviceptr, CUstream)) {
  const RealDriver* real = real_driver();
  {
    MutexLock lock(g_region_mu);
    if (!owns_allocation(dptr)) return forward(dptr, stream);
  }
  if (stream_capturing(stream, ptsz)) {
    std::fprintf(
        stderr,
        "gcr: cuMemFreeAsync of gcr-managed memory inside a stream capture is not supported\n");
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  // The memory is reusable once the stream has passed this point: an event marks it.
  CUevent ev;
  if (CUresult r = real->cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING)) return r;
  auto record = ptsz ? real->cuEventRecord_ptsz : real->cuEventRecord;
  if (CUresult r = record(ev, stream)) {
    real->cuEventDestroy_v2(ev);
    return r;
  }
  MutexLock lock(g_region_mu);
  g_pending.push_back({ev, dptr});
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real->cuMemAlloc_v2(dptr, bytes);
  GateScope gate;
  return alloc_sync(dptr, bytes);
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                            unsigned int element_bytes) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real->cuMemAllocPitch_v2(dptr, pitch, width, height, element_bytes);
  GateScope gate;
  if (!pitch || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (element_bytes != 4 && element_bytes != 8 && element_bytes != 16)
    return CUDA_ERROR_INVALID_VALUE;
  std::size_t p = (width + 511) / 512 * 512;
  if (CUresult r = alloc_sync(dptr, p * height)) return r;
  *pitch = p;
  return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged || dptr == 0) return real->cuMemFree_v2(dptr);
  GateScope gate;
  {
    MutexLock lock(g_region_mu);
    if (!owns_allocation(dptr)) return real->cuMemFree_v2(dptr);
  }
  // cuMemFree synchronizes; unmapping does not, so work still queued could touch freed memory.
  if (CUresult r = real->cuCtxSynchronize(); r != CUDA_SUCCESS && r != CUDA_ERROR_INVALID_CONTEXT)
    return r;
  MutexLock lock(g_region_mu);
  return free_device(dptr) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real->cuMemAllocAsync(dptr, bytes, stream);
  GateScope gate;
  return alloc_async(dptr, bytes, nullptr, stream, false, real->cuMemAllocAsync);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real->cuMemAllocAsync_ptsz(dptr, bytes, stream);
  GateScope gate;
  return alloc_async(dptr, bytes, nullptr, stream, true, real->cuMemAllocAsync_ptsz);
}

// Pool allocations land in regions too; the pool's attributes then describe only what the driver
// itself allocated from it.
CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                 CUstream stream) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged || stream_capturing(stream, false))
    return real->cuMemAllocFromPoolAsync(dptr, bytes, pool, stream);
  GateScope gate;
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  return alloc_async(dptr, bytes, pool, stream, false, real->cuMemAllocAsync);
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                      CUstream stream) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged || stream_capturing(stream, true))
    return real->cuMemAllocFromPoolAsync_ptsz(dptr, bytes, pool, stream);
  GateScope gate;
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  return alloc_async(dptr, bytes, pool, stream, true, real->cuMemAllocAsync_ptsz);
}

// Where each pool lives, for cuMemAllocFromPoolAsync.
CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  static const auto real = real_fn<decltype(&::cuMemPoolCreate)>("cuMemPoolCreate");
  if (g_unmanaged) return real(pool, props);
  GateScope gate;
  CUresult r = real(pool, props);
  if (r == CUDA_SUCCESS && pool && props && props->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
    note_pool(*pool, props->location.id);
  return r;
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  static const auto real =
      real_fn<decltype(&::cuDeviceGetDefaultMemPool)>("cuDeviceGetDefaultMemPool");
  if (g_unmanaged) return real(pool, dev);
  GateScope gate;
  CUresult r = real(pool, dev);
  if (r == CUDA_SUCCESS && pool) note_pool(*pool, dev);
  return r;
}

CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  static const auto real = real_fn<decltype(&::cuDeviceGetMemPool)>("cuDeviceGetMemPool");
  if (g_unmanaged) return real(pool, dev);
  GateScope gate;
  CUresult r = real(pool, dev);
  if (r == CUDA_SUCCESS && pool) note_pool(*pool, dev);
  return r;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  static const auto real = real_fn<decltype(&::cuMemPoolDestroy)>("cuMemPoolDestroy");
  if (g_unmanaged) return real(pool);
  GateScope gate;
  {
    MutexLock lock(g_region_mu);
    g_pool_devices.erase(pool);
  }
  return real(pool);
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real->cuMemFreeAsync(dptr, stream);
  GateScope gate;
  return free_async(dptr, stream, false, real->cuMemFreeAsync);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real->cuMemFreeAsync_ptsz(dptr, stream);
  GateScope gate;
  return free_async(dptr, stream, true, real->cuMemFreeAsync_ptsz);
}

CUresult cuMemAllocManaged(CUdeviceptr*, size_t, unsigned int) {
  std::fprintf(
      stderr,
      "gcr: cuMemAllocManaged: managed (unified) memory cannot be checkpointed by gcr and is "
      "refused; allocate with cuMemAlloc/cudaMalloc, or run the program without gcr\n");
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr dptr) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real->cuMemGetAddressRange_v2(base, size, dptr);
  GateScope gate;
  {
    MutexLock lock(g_region_mu);
    CUdeviceptr b = 0;
    std::uint64_t s = 0;
    if (find_allocation(dptr, &b, &s)) {
      if (base) *base = b;
      if (size) *size = s;
      return CUDA_SUCCESS;
    }
  }
  return real->cuMemGetAddressRange_v2(base, size, dptr);
}

// The range attributes describe the program's allocation, not the slab region behind it.
static void patch_range_attribute(CUpointer_attribute attr, void* data, CUdeviceptr ptr) {
  if (attr != CU_POINTER_ATTRIBUTE_RANGE_START_ADDR && attr != CU_POINTER_ATTRIBUTE_RANGE_SIZE)
    return;
  std::uint64_t range[2];  // start, size
  {
    MutexLock lock(g_region_mu);
    CUdeviceptr start = 0;
    if (!find_allocation(ptr, &start, &range[1])) return;
    range[0] = start;
  }
  if (attr == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) {
    CUdeviceptr start = range[0];
    std::memcpy(data, &start, sizeof start);
  } else {
    std::size_t size = range[1];
    std::memcpy(data, &size, sizeof size);
  }
}

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr ptr) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real->cuPointerGetAttribute(data, attr, ptr);
  GateScope gate;  // parked memory is unmapped: a query must wait for it to come back
  CUresult r = real->cuPointerGetAttribute(data, attr, ptr);
  if (r == CUDA_SUCCESS && !g_unmanaged) patch_range_attribute(attr, data, ptr);
  return r;
}

CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute* attrs, void** data,
                                CUdeviceptr ptr) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real->cuPointerGetAttributes(n, attrs, data, ptr);
  GateScope gate;
  CUresult r = real->cuPointerGetAttributes(n, attrs, data, ptr);
  if (r == CUDA_SUCCESS && !g_unmanaged && attrs && data)
    for (unsigned i = 0; i < n; ++i)
      if (data[i]) patch_range_attribute(attrs[i], data[i], ptr);
  return r;
}

// ---- the program's own VMM calls ----

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real->cuMemAddressReserve(ptr, size, alignment, addr, flags);
  GateScope gate;
  if (addr != 0 || flags != 0 || !ptr || size == 0 || size % kGranule)
    return real->cuMemAddressReserve(ptr, size, alignment, addr, flags);
  MutexLock lock(g_region_mu);
  if (ensure_arena() != CUDA_SUCCESS)
    return real->cuMemAddressReserve(ptr, size, alignment, addr, flags);
  std::uint64_t align = alignment > kGranule ? alignment : kGranule;
  std::uint64_t got;
  if (!arena_take(size, align, &got))
    return real->cuMemAddressReserve(ptr, size, alignment, addr, flags);
  g_user_reservations.insert(got);
  *ptr = got;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real->cuMemAddressFree(ptr, size);
  GateScope gate;
  {
    MutexLock lock(g_region_mu);
    if (g_user_reservations.erase(ptr)) {
      arena_give(ptr, size);
      return CUDA_SUCCESS;
    }
  }
  return real->cuMemAddressFree(ptr, size);
}

}  // extern "C"
