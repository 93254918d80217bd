// The arena, the region table and the granule map of Note [Regions and slabs].
#include "regions.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "config.h"
#include "cut.h"
#include "real_driver.h"
#include "vmm_handles.h"

namespace gcr::interpose {

Arena g_arena;
Region* g_regions = nullptr;
std::atomic<std::uint64_t> g_epoch{1};
std::atomic<bool> g_all_dirty{false};
std::atomic<bool> g_host_registered{false};
RankedMutex g_region_mu{LockRank::regions};
std::atomic<std::uint32_t> g_touch_count{0};
std::atomic<std::uint32_t> g_touch_log[kTouchLog];

void note_first_touch(std::uint32_t id, std::uint64_t epoch) noexcept {
  if (g_regions[id].touch_epoch.exchange(epoch, std::memory_order_relaxed) == epoch) return;
  std::uint32_t i = g_touch_count.fetch_add(1, std::memory_order_relaxed);
  if (i < kTouchLog) g_touch_log[i].store(id, std::memory_order_relaxed);
}

namespace {

std::map<std::uint64_t, std::uint64_t> g_arena_free
    GCR_GUARDED_BY(g_region_mu);                                    // free ranges by address
std::vector<std::uint32_t> g_free_ids GCR_GUARDED_BY(g_region_mu);  // recycled region ids
std::uint32_t g_next_id GCR_GUARDED_BY(g_region_mu) = 1;
// The contexts the program has used, under a lock of their own.
struct Contexts {
  RankedMutex mu{LockRank::contexts};
  std::set<CUcontext> known GCR_GUARDED_BY(mu);
};
Contexts g_contexts;

void* map_zeroed(std::uint64_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

std::uint32_t new_id() GCR_REQUIRES(g_region_mu) {
  if (!g_free_ids.empty()) {
    std::uint32_t id = g_free_ids.back();
    g_free_ids.pop_back();
    return id;
  }
  return g_next_id < kMaxRegions ? g_next_id++ : 0;
}

void set_granules(std::uint64_t address, std::uint64_t size, std::uint32_t id) {
  if (!in_arena(address)) return;
  for (std::uint64_t a = address; a < address + size; a += kGranule)
    g_arena.granule_region[(a - g_arena.base) / kGranule].store(id, std::memory_order_release);
}

// Takes a region out of the table (its memory is the caller's business) and recycles its id.
void free_slot(std::uint32_t id) GCR_REQUIRES(g_region_mu) {
  Region& reg = g_regions[id];
  set_granules(reg.address, reg.size, 0);
  reg.cow_entry.store(0);  // gcrd reads the cut's bytes from its own import
  reg.kind = RegionKind::free;
  reg.handle = 0;
  reg.allocation = 0;
  reg.shared.store(false);
  g_free_ids.push_back(id);
}

}  // namespace

bool in_arena(std::uint64_t addr) {
  return addr - g_arena.base < g_arena.size;
}

CUresult ensure_arena() {
  if (g_arena.base) return CUDA_SUCCESS;
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  std::uint64_t size = config().arena_bytes;
  if (!size) {
    int count = 0;
    if (CUresult r = real->cuDeviceGetCount(&count)) return r;
    std::uint64_t total = 0;
    for (int d = 0; d < count; ++d) {
      std::size_t bytes = 0;
      if (real->cuDeviceTotalMem_v2(&bytes, d) == CUDA_SUCCESS) total += bytes;
    }
    size = std::max<std::uint64_t>(2 * total, 8ull << 30);
  }
  size = (size + kGranule - 1) / kGranule * kGranule;
  CUdeviceptr base = 0;
  if (CUresult r = real->cuMemAddressReserve(&base, size, kGranule, 0, 0)) {
    std::fprintf(
        stderr,
        "gcr: cannot reserve a %llu GiB device address arena (%d); set GCR_ARENA_BYTES lower\n",
        static_cast<unsigned long long>(size >> 30), static_cast<int>(r));
    return r;
  }
  g_regions = static_cast<Region*>(map_zeroed(sizeof(Region) * kMaxRegions));
  g_arena.granule_region = static_cast<std::atomic<std::uint32_t>*>(
      map_zeroed(sizeof(std::atomic<std::uint32_t>) * (size / kGranule)));
  if (!g_regions || !g_arena.granule_region) return CUDA_ERROR_OUT_OF_MEMORY;
  g_arena_free[base] = size;
  g_arena.size = size;
  g_arena.base = base;  // last: in_arena() is false until the table exists
  if (config().log)
    std::fprintf(stderr, "gcr: arena 0x%llx + %llu GiB\n", static_cast<unsigned long long>(base),
                 static_cast<unsigned long long>(size >> 30));
  return CUDA_SUCCESS;
}

bool arena_take(std::uint64_t size, std::uint64_t align, std::uint64_t* out) {
  for (auto it = g_arena_free.begin(); it != g_arena_free.end(); ++it) {
    std::uint64_t start = (it->first + align - 1) / align * align;
    if (start + size > it->first + it->second) continue;
    std::uint64_t r_start = it->first, r_end = it->first + it->second;
    g_arena_free.erase(it);
    if (start > r_start) g_arena_free[r_start] = start - r_start;
    if (start + size < r_end) g_arena_free[start + size] = r_end - (start + size);
    *out = start;
    return true;
  }
  return false;
}

void arena_give(std::uint64_t address, std::uint64_t size) {
  auto [it, inserted] = g_arena_free.emplace(address, size);
  if (!inserted) return;
  if (auto next = std::next(it); next != g_arena_free.end() && address + size == next->first) {
    it->second += next->second;
    g_arena_free.erase(next);
  }
  if (it != g_arena_free.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      g_arena_free.erase(it);
    }
  }
}

CUresult create_region(std::uint64_t size, std::uint32_t device, RegionKind kind,
                       std::uint32_t* out) {
  const RealDriver* real = real_driver();
  if (CUresult r = ensure_arena()) return r;
  std::uint64_t address;
  if (!arena_take(size, kGranule, &address)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = static_cast<int>(device);
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle handle = 0;
  CUresult r = real->cuMemCreate(&handle, size, &prop, 0);
  if (r == CUDA_SUCCESS) r = real->cuMemMap(address, size, 0, handle, 0);
  if (r == CUDA_SUCCESS) {
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = real->cuMemSetAccess(address, size, &access, 1);
    if (r != CUDA_SUCCESS) real->cuMemUnmap(address, size);
  }
  if (r != CUDA_SUCCESS) {
    if (handle) real->cuMemRelease(handle);
    arena_give(address, size);
    return r;
  }
  std::uint32_t id = new_id();
  if (!id) {
    real->cuMemUnmap(address, size);
    real->cuMemRelease(handle);
    arena_give(address, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Region& reg = g_regions[id];
  reg.address = address;
  reg.size = size;
  reg.phys_offset = 0;
  reg.handle = handle;
  reg.allocation = 0;
  reg.device = device;
  reg.kind = kind;
  reg.parked = false;
  reg.dirty_epoch.store(g_epoch.load());  // new memory belongs to the next checkpoint
  set_granules(address, size, id);
  *out = id;
  if (config().log)
    std::fprintf(stderr, "gcr: region %u 0x%llx + %llu on device %u\n", id,
                 static_cast<unsigned long long>(address), static_cast<unsigned long long>(size),
                 device);
  return CUDA_SUCCESS;
}

void destroy_region(std::uint32_t id) {
  const RealDriver* real = real_driver();
  ipc_forget_region(id);
  Region& reg = g_regions[id];
  if (!reg.parked) {
    real->cuMemUnmap(reg.address, reg.size);
    if (reg.handle) real->cuMemRelease(reg.handle);
  }
  if (reg.kind != RegionKind::user) arena_give(reg.address, reg.size);
  free_slot(id);
}

std::uint32_t register_user_region(std::uint64_t address, std::uint64_t size, std::uint64_t offset,
                                   std::uint32_t device, std::uint32_t allocation) {
  std::uint32_t id = new_id();
  if (!id) return 0;
  Region& reg = g_regions[id];
  reg.address = address;
  reg.size = size;
  reg.phys_offset = offset;
  reg.handle = 0;  // the program owns its handle; park retains one from the address
  reg.allocation = allocation;
  reg.device = device;
  reg.kind = RegionKind::user;
  reg.parked = false;
  reg.dirty_epoch.store(g_epoch.load());
  set_granules(address, size, id);
  return id;
}

std::uint32_t register_held_region(std::uint64_t size, std::uint32_t device,
                                   std::uint32_t allocation) {
  std::uint64_t address = 0;
  if (ensure_arena() != CUDA_SUCCESS || !arena_take(size, kGranule, &address)) return 0;
  std::uint32_t id = register_user_region(address, size, 0, device, allocation);
  if (!id) {
    arena_give(address, size);
    return 0;
  }
  g_regions[id].kind = RegionKind::held;
  return id;
}

void drop_held_regions() {
  for (std::uint32_t id = 1; id < g_next_id; ++id) {
    Region& reg = g_regions[id];
    if (reg.kind != RegionKind::held) continue;
    arena_give(reg.address, reg.size);
    free_slot(id);
  }
}

std::vector<std::uint32_t> unregister_user_regions(std::uint64_t address, std::uint64_t size) {
  std::vector<std::uint32_t> allocations;
  for (std::uint32_t id = 1; id < g_next_id; ++id) {
    Region& reg = g_regions[id];
    if (reg.kind == RegionKind::user && reg.address >= address &&
        reg.address + reg.size <= address + size) {
      if (reg.allocation) allocations.push_back(reg.allocation);
      free_slot(id);
    }
  }
  return allocations;
}

std::atomic<std::uint32_t> g_shared_ids[kMaxSharedIds];
std::atomic<std::uint32_t> g_shared_id_count{0};

void mark_region_shared(std::uint32_t id) {
  g_regions[id].shared.store(true, std::memory_order_relaxed);
  // Every id ever shared, once (ids are recycled): a few per allocation a job shares.
  const std::uint32_t n = g_shared_id_count.load(std::memory_order_relaxed);
  bool listed = false;
  for (std::uint32_t i = 0; i < n && !listed; ++i)
    listed = g_shared_ids[i].load(std::memory_order_relaxed) == id;
  if (!listed && n < kMaxSharedIds) {
    g_shared_ids[n].store(id, std::memory_order_relaxed);
    g_shared_id_count.store(n + 1, std::memory_order_release);
  } else if (!listed) {  // too many to list: every region counts as written
    g_all_dirty.store(true, std::memory_order_relaxed);
  }
  g_comm_possible.store(true, std::memory_order_relaxed);
}

std::uint32_t region_id_at(std::uint64_t addr) {
  for (std::uint32_t id = 1; id < g_next_id; ++id) {
    const Region& r = g_regions[id];
    if (r.kind != RegionKind::free && addr - r.address < r.size) return id;
  }
  return 0;
}

std::vector<std::uint32_t> live_region_ids() {
  std::vector<std::uint32_t> ids;
  for (std::uint32_t id = 1; id < g_next_id; ++id)
    if (g_regions[id].kind != RegionKind::free) ids.push_back(id);
  return ids;
}

void mark_shared_written() {
  const bool cow = g_cow_active.load(std::memory_order_relaxed);
  const std::uint64_t epoch = g_epoch.load(std::memory_order_relaxed);
  const std::uint32_t n = g_shared_id_count.load(std::memory_order_acquire);
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint32_t id = g_shared_ids[i].load(std::memory_order_relaxed);
    Region& r = g_regions[id];
    if (!r.shared.load(std::memory_order_relaxed)) continue;
    if (cow) [[unlikely]]
      cow_before_write(id);
    if (r.dirty_epoch.load(std::memory_order_relaxed) != epoch)
      r.dirty_epoch.store(epoch, std::memory_order_relaxed);
  }
}

bool region_dirty(const Region& r, std::uint64_t since_epoch) {
  // A region outside the arena (the program's own mapping at an address the driver chose, when
  // the arena was full or the program asked for an address) has no granule entries, so nothing
  // can mark it: it counts as written in every epoch.
  return g_all_dirty.load() || !in_arena(r.address) || r.dirty_epoch.load() >= since_epoch;
}

void note_context(CUcontext ctx) {
  if (!ctx) return;
  MutexLock lock(g_contexts.mu);
  g_contexts.known.insert(ctx);
}

void forget_context(CUcontext ctx) {
  MutexLock lock(g_contexts.mu);
  g_contexts.known.erase(ctx);
}

std::vector<CUcontext> known_contexts() {
  MutexLock lock(g_contexts.mu);
  return {g_contexts.known.begin(), g_contexts.known.end()};
}

}  // namespace gcr::interpose
