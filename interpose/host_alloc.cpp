// Host memory pinned for devices (Note [Pinned host memory is gcr's]): cuMemHostAlloc and
// cuMemAllocHost, the program's own cuMemHostRegister ranges, what is reported of them to gcrd
// (host_dma) and their park and unpark.
//
// Note [Pinned host memory is gcr's]
// The driver's own pinned allocations are its business: on a GPU they may be mappings of the
// driver's device files, which CRIU can neither write-protect nor dump, and which the driver's
// checkpoint must turn into something CRIU can. gcr allocates them itself instead: private
// anonymous memory (mmap), registered with the driver (cuMemHostRegister, portable and mapped:
// with unified addressing cuMemHostAlloc memory is both). So pinned memory is host memory like any
// other to CRIU: write-protected at the cut, written after the resume, tracked between
// checkpoints (Note [Device writes to pinned host memory] in pinned.h keeps device writes
// visible), deduplicated in the store. Like the driver's, it is not inherited by a fork
// (MADV_DONTFORK). WRITECOMBINED is not kept (a registration cannot ask for it; it only changes
// how fast the CPU reads the memory), and cuMemHostGetFlags answers what the program asked for.
// GCR_PINNED_OWN=0 leaves allocation to the driver, as does a device that reaches registered
// memory at another address than the host's.
//
// With GCR_PARK_PINNED=1 a park also unregisters every range, the program's own registrations
// too, so that the driver's checkpoint holds none of it, and unpark registers them again at the
// same addresses (a restored process's too). Not the default: see park_pinned().
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "agent_ops.h"
#include "alloc.h"
#include "config.h"
#include "gate.h"
#include "pinned.h"
#include "real_driver.h"
#include "regions.h"

namespace gcr::interpose {
namespace {

// Note [Host memory tracked between checkpoints]: pinned host ranges by address, for gcrd. Those
// allocated (`allocated`) are dropped when freed; registered ones stay (a device may have written
// them before cuMemHostUnregister, with a 1.4 gcrd's rule).
struct HostDma {
  std::uint64_t bytes = 0;
  bool allocated = false;
};
// The ranges the program has pinned: registered with the driver (`live`), or parked.
struct Registration {
  std::uint64_t bytes = 0;
  unsigned flags = 0;        // cuMemHostRegister's
  unsigned alloc_flags = 0;  // cuMemHostAlloc's, for gcr's own allocations
  bool owned = false;        // allocated here: unregistered and unmapped by cuMemFreeHost
  bool live = true;          // registered with the driver now
  CUcontext ctx = nullptr;   // current at registration (a range not portable is that context's)
};

// The program's pinned host memory, under a lock of its own (not the launch path).
struct HostMemory {
  RankedMutex mu{LockRank::host_memory};
  std::map<std::uint64_t, HostDma> dma GCR_GUARDED_BY(mu);
  bool dma_overflow GCR_GUARDED_BY(mu) = false;
  std::map<std::uint64_t, Registration> registered GCR_GUARDED_BY(mu);
};
HostMemory g_host;

constexpr unsigned kOwnedRegisterFlags = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP;

bool env_is(const char* name, std::string_view value) {
  const char* v = std::getenv(name);
  return v && value == v;
}

// gcr allocates pinned memory itself unless told not to, or unless the device reaches registered
// memory at another address than the host's (then the program's pointers into it would be device
// pointers gcr does not know; the driver's own allocations are reached at the host address).
bool own_allocations() {
  static const bool asked = !env_is("GCR_PINNED_OWN", "0");
  static std::atomic<int> same_pointer{-1};  // unknown until a context is current
  if (!asked) return false;
  if (int known = same_pointer.load(std::memory_order_relaxed); known >= 0) return known == 1;
  static const auto attribute = real_fn<decltype(&::cuDeviceGetAttribute)>("cuDeviceGetAttribute");
  CUdevice device;
  int value = 0;
  if (real_driver()->cuCtxGetDevice(&device) != CUDA_SUCCESS) return false;
  if (attribute(&value, CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, device) !=
      CUDA_SUCCESS)
    value = 0;
  same_pointer.store(value == 1 ? 1 : 0, std::memory_order_relaxed);
  return value == 1;
}

// GCR_PARK_PINNED=1: a park unregisters every pinned range and unpark registers it again, so that
// the driver's checkpoint holds none of it. Not the default: registering pins every page for
// writing, and at unpark after a live checkpoint those pages are write-protected (CRIU's
// --cow-dump, gcrd's tracking), so each would fault, be copied and count as written, and a driver
// that cannot wait for the fault fails the registration.
bool park_pinned() {
  static const bool park = env_is("GCR_PARK_PINNED", "1");
  return park;
}

// Calls fn with r's context current on this thread (the agent thread has none of its own).
template <typename Fn>
CUresult in_context(const Registration& r, Fn&& fn) {
  const RealDriver* real = real_driver();
  CUcontext ctx = r.ctx;
  if (!ctx) {
    std::vector<CUcontext> known = known_contexts();
    if (!known.empty()) ctx = known.front();
  }
  if (ctx && real->cuCtxPushCurrent_v2(ctx) != CUDA_SUCCESS) ctx = nullptr;
  CUresult result = fn();
  if (ctx) {
    CUcontext popped;
    real->cuCtxPopCurrent_v2(&popped);
  }
  return result;
}

std::uint64_t page_bytes() {
  static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

// With g_host.mu held.
void note_host_dma(std::uint64_t p, std::uint64_t bytes, bool allocated) GCR_REQUIRES(g_host.mu) {
  if (!p || bytes == 0) return;
  auto [it, added] = g_host.dma.try_emplace(p, HostDma{bytes, allocated});
  if (!added) {
    it->second.bytes = std::max(it->second.bytes, bytes);
    it->second.allocated = it->second.allocated && allocated;
  }
  if (g_host.dma.size() > control::kMaxHostDmaRanges) {
    g_host.dma.erase(it);
    g_host.dma_overflow = true;
  }
}

void forget_host_dma(std::uint64_t p) GCR_REQUIRES(g_host.mu) {
  auto it = g_host.dma.find(p);
  if (it != g_host.dma.end() && it->second.allocated) g_host.dma.erase(it);
}

// gcr's own allocation holding p, with g_host.mu held.
const Registration* owned_at(std::uint64_t p) GCR_REQUIRES(g_host.mu) {
  auto it = g_host.registered.upper_bound(p);
  if (it == g_host.registered.begin()) return nullptr;
  --it;
  return it->second.owned && p < it->first + it->second.bytes ? &it->second : nullptr;
}

CUresult host_alloc(void** pp, size_t bytes, unsigned flags) {
  if (!pp) return CUDA_ERROR_INVALID_VALUE;
  if (bytes == 0) {
    *pp = nullptr;
    return CUDA_SUCCESS;
  }
  const std::uint64_t size = (bytes + page_bytes() - 1) / page_bytes() * page_bytes();
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  // As the driver's own: a forked child (a data-loader worker) would otherwise copy every page at
  // once, since pinned pages cannot be shared copy-on-write.
  ::madvise(p, size, MADV_DONTFORK);
  if (CUresult r = real_driver()->cuMemHostRegister_v2(p, size, kOwnedRegisterFlags)) {
    ::munmap(p, size);
    return r == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED ? CUDA_ERROR_OUT_OF_MEMORY : r;
  }
  const auto a = reinterpret_cast<std::uint64_t>(p);
  {
    MutexLock lock(g_host.mu);
    CUcontext ctx = nullptr;
    real_driver()->cuCtxGetCurrent(&ctx);
    g_host.registered[a] = Registration{size, kOwnedRegisterFlags, flags, true, true, ctx};
    note_host_dma(a, size, true);
  }
  pinned_add(a, size);
  *pp = p;
  return CUDA_SUCCESS;
}

// GCR_PINNED_OWN=0: the driver's own allocation, reported and watched all the same.
CUresult driver_allocated(CUresult r, void** pp, size_t bytes) {
  if (r != CUDA_SUCCESS || !pp || !*pp) return r;
  const auto a = reinterpret_cast<std::uint64_t>(*pp);
  {
    MutexLock lock(g_host.mu);
    note_host_dma(a, bytes, true);
  }
  pinned_add(a, bytes);
  return r;
}

}  // namespace

control::HostDmaRanges op_host_dma() {
  control::HostDmaRanges out;
  MutexLock lock(g_host.mu);
  out.overflow = g_host.dma_overflow;
  out.touched = pinned_writes_seen();  // Note [Device writes to pinned host memory] (pinned.h)
  for (const auto& [address, range] : g_host.dma) out.ranges.push_back({address, range.bytes});
  return out;
}

// Best effort both ways: a range the driver will not let go of stays registered (the driver's
// checkpoint then holds it), and one it will not take again is said on stderr and stays parked
// (its device pointer fails, where a refusal would leave the whole process parked).
void park_host_memory() {
  if (!park_pinned()) return;
  const RealDriver* real = real_driver();
  MutexLock lock(g_host.mu);
  std::size_t parked = 0;
  for (auto& entry : g_host.registered) {
    const std::uint64_t address = entry.first;  // named, not bound: lambdas below capture it
    Registration& r = entry.second;
    if (!r.live) continue;
    CUresult result =
        in_context(r, [&] { return real->cuMemHostUnregister(reinterpret_cast<void*>(address)); });
    if (result == CUDA_SUCCESS) {
      r.live = false;
      ++parked;
    } else {
      std::fprintf(stderr, "gcr: park: pinned host memory at 0x%llx stays registered (%d)\n",
                   static_cast<unsigned long long>(address), static_cast<int>(result));
    }
  }
  if (config().log && parked) std::fprintf(stderr, "gcr: parked %zu pinned host ranges\n", parked);
}

void unpark_host_memory() {
  const RealDriver* real = real_driver();
  MutexLock lock(g_host.mu);
  for (auto& entry : g_host.registered) {
    const std::uint64_t address = entry.first;  // named, not bound: lambdas below capture it
    Registration& r = entry.second;
    if (r.live) continue;
    CUresult result = in_context(r, [&] {
      return real->cuMemHostRegister_v2(reinterpret_cast<void*>(address), r.bytes, r.flags);
    });
    if (result == CUDA_SUCCESS)
      r.live = true;
    else
      std::fprintf(stderr,
                   "gcr: unpark: pinned host memory at 0x%llx (%llu bytes) could not be "
                   "registered with the driver again (%d): devices cannot reach it\n",
                   static_cast<unsigned long long>(address),
                   static_cast<unsigned long long>(r.bytes), static_cast<int>(result));
  }
}

}  // namespace gcr::interpose

using namespace gcr::interpose;

extern "C" {

// The program's own pinned ranges: registered with the driver, reported to gcrd, their device
// writes preceded by the process's (pinned.h); a read-only registration is only read by devices.
CUresult cuMemHostRegister_v2(void* p, size_t bytes, unsigned int flags) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real->cuMemHostRegister_v2(p, bytes, flags);
  GateScope gate;
  CUresult r = real->cuMemHostRegister_v2(p, bytes, flags);
  if (r != CUDA_SUCCESS) return r;
  g_host_registered.store(true, std::memory_order_relaxed);  // for a 1.3 gcrd's status
  const auto a = reinterpret_cast<std::uint64_t>(p);
  {
    MutexLock lock(g_host.mu);
    CUcontext ctx = nullptr;
    real->cuCtxGetCurrent(&ctx);
    g_host.registered[a] = Registration{bytes, flags, 0, false, true, ctx};
    note_host_dma(a, bytes, false);
  }
  // Read-only: devices only read it. I/O memory: another device's registers, not host memory.
  if (!(flags & (CU_MEMHOSTREGISTER_READ_ONLY | CU_MEMHOSTREGISTER_IOMEMORY))) pinned_add(a, bytes);
  return r;
}

CUresult cuMemHostUnregister(void* p) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real->cuMemHostUnregister(p);
  GateScope gate;
  const auto a = reinterpret_cast<std::uint64_t>(p);
  {
    MutexLock lock(g_host.mu);
    if (auto it = g_host.registered.find(a); it != g_host.registered.end() && it->second.owned)
      return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;  // as the driver says of its allocations
  }
  CUresult r = real->cuMemHostUnregister(p);
  if (r != CUDA_SUCCESS) return r;
  {
    MutexLock lock(g_host.mu);
    g_host.registered.erase(a);
  }
  pinned_remove(a);
  return r;
}

CUresult cuMemHostAlloc(void** pp, size_t bytes, unsigned int flags) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real->cuMemHostAlloc(pp, bytes, flags);
  if (flags &
      ~(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED))
    return CUDA_ERROR_INVALID_VALUE;
  GateScope gate;
  if (own_allocations()) return host_alloc(pp, bytes, flags);
  return driver_allocated(real->cuMemHostAlloc(pp, bytes, flags), pp, bytes);
}

CUresult cuMemAllocHost_v2(void** pp, size_t bytes) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real->cuMemAllocHost_v2(pp, bytes);
  GateScope gate;
  if (own_allocations()) return host_alloc(pp, bytes, 0);
  return driver_allocated(real->cuMemAllocHost_v2(pp, bytes), pp, bytes);
}

CUresult cuMemFreeHost(void* p) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real->cuMemFreeHost(p);
  GateScope gate;
  const auto a = reinterpret_cast<std::uint64_t>(p);
  std::uint64_t owned_bytes = 0;
  {
    MutexLock lock(g_host.mu);
    if (auto it = g_host.registered.find(a); it != g_host.registered.end() && it->second.owned)
      owned_bytes = it->second.bytes;
  }
  if (!owned_bytes) {
    CUresult r = real->cuMemFreeHost(p);
    if (r == CUDA_SUCCESS) {
      pinned_remove(a);
      MutexLock lock(g_host.mu);
      forget_host_dma(a);
    }
    return r;
  }
  // Work still queued may copy into it: the driver's cuMemFreeHost waits for it too.
  if (CUresult r = real->cuCtxSynchronize(); r != CUDA_SUCCESS && r != CUDA_ERROR_INVALID_CONTEXT)
    return r;
  // Before the memory goes: a device write racing the free must not find it armed and unmapped.
  pinned_remove(a);
  real->cuMemHostUnregister(p);
  ::munmap(p, owned_bytes);
  MutexLock lock(g_host.mu);
  g_host.registered.erase(a);
  forget_host_dma(a);
  return CUDA_SUCCESS;
}

CUresult cuMemHostGetFlags(unsigned int* flags, void* p) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real->cuMemHostGetFlags(flags, p);
  GateScope gate;
  {
    MutexLock lock(g_host.mu);
    if (const Registration* r = owned_at(reinterpret_cast<std::uint64_t>(p))) {
      if (!flags) return CUDA_ERROR_INVALID_VALUE;
      *flags = r->alloc_flags;
      return CUDA_SUCCESS;
    }
  }
  return real->cuMemHostGetFlags(flags, p);
}

}  // extern "C"
