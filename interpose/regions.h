// Note [Regions and slabs]
// - Every device allocation of the program lives in a *region*: one physical allocation
//   (cuMemCreate with an exportable POSIX-fd handle) mapped read-write at an address gcr chooses
//   in one arena of device virtual addresses reserved at the first allocation. The same sequence
//   of allocations gets the same addresses in every run, and a parked region comes back at its
//   address after a restore.
// - Requests up to GCR_SMALL_BYTES (1 MiB) share 2 MiB slab regions, first fit, 512-byte aligned;
//   larger ones get a region of their own, rounded up to the 2 MiB granularity. An empty slab is
//   released. The overhead (region bytes minus requested bytes) is reported by `status`.
// - The program's own VMM calls are regions too: cuMemCreate gains the POSIX-fd handle type,
//   cuMemAddressReserve without an address hint is carved from the arena, cuMemMap registers the
//   mapping.
// - Write tracking reads one immutable-per-slot table: `granule_region[(addr - arena) >> 21]` is
//   the id of the region covering that 2 MiB granule (0: none), and a region's `dirty_epoch` is the
//   epoch of its last possible write. A launch marks what it may write with relaxed loads and
//   stores: no lock, syscall or allocation. Region slots are never unmapped, so a reader racing a
//   free marks at worst a recycled slot dirty, which over-approximates and is safe.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "agent_ops.h"
#include "cow.h"
#include "locks.h"
#include "pinned.h"

namespace gcr::interpose {

inline constexpr std::uint64_t kGranule = 2ull << 20;
inline constexpr std::uint32_t kMaxRegions = 1u << 20;

// held: an allocation of the program that is mapped nowhere at park, given an address of the
// arena (not mapped) for the park's duration: park knows memory by address.
enum class RegionKind : std::uint8_t { free = 0, slab = 1, large = 2, user = 3, held = 4 };

struct Region {
  std::atomic<std::uint64_t> dirty_epoch{0};
  std::atomic<std::uint32_t> cow_entry{0};    // soft copy-on-write table entry + 1; 0: none
  std::atomic<std::uint64_t> touch_epoch{0};  // the epoch of its last first-touch record
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  std::uint64_t phys_offset = 0;            // user mappings may show part of an allocation
  CUmemGenericAllocationHandle handle = 0;  // 0 while parked (user regions: retained at park)
  std::uint32_t allocation = 0;  // user regions: the VirtualAllocation mapped (vmm_handles.h)
  std::uint32_t device = 0;
  RegionKind kind = RegionKind::free;
  bool parked = false;
  // Another process maps this memory too (Note [Shared regions] in vmm_handles.h): a launch that
  // passes a pointer into it is a communication launch (Note [A consistent cut] in cut.h).
  std::atomic<bool> shared{false};
};

struct Arena {
  std::uint64_t base = 0;
  std::uint64_t size = 0;
  std::atomic<std::uint32_t>* granule_region = nullptr;  // size / kGranule entries
};

extern Arena g_arena;
extern Region* g_regions;  // kMaxRegions slots, index 0 unused
extern std::atomic<std::uint64_t> g_epoch;
extern std::atomic<bool> g_all_dirty;        // conservative marking since the epoch began
extern std::atomic<bool> g_host_registered;  // cuMemHostRegister succeeded once (sticky)

// Soft copy-on-write and on-demand restore (cow.h): slow paths, called by the marking below.

// Note [First-touch order]
// The order in which regions are first touched (read or written) after a checkpoint's cut is
// what a restore of it should load first. Each region remembers the epoch in which it was last
// recorded; the first touch in a new epoch appends its id to g_touch_log (a fixed array: the
// first kTouchLog regions are enough to order a restore). One relaxed load per touch otherwise.
inline constexpr std::uint32_t kTouchLog = 1u << 14;
extern std::atomic<std::uint32_t> g_touch_count;  // appends so far in this epoch
extern std::atomic<std::uint32_t> g_touch_log[kTouchLog];
void note_first_touch(std::uint32_t id, std::uint64_t epoch) noexcept;

inline void note_touch(std::uint32_t id) {
  std::uint64_t epoch = g_epoch.load(std::memory_order_relaxed);
  if (g_regions[id].touch_epoch.load(std::memory_order_relaxed) != epoch) [[unlikely]]
    note_first_touch(id, epoch);
}

// Marks the region holding addr as possibly written in this epoch. Hot path.
inline void mark_device_written(std::uint64_t addr) {
  std::uint64_t off = addr - g_arena.base;
  if (off >= g_arena.size) return;
  std::uint32_t id = g_arena.granule_region[off / kGranule].load(std::memory_order_relaxed);
  if (!id) return;
  note_touch(id);
  if (g_cow_active.load(std::memory_order_relaxed)) [[unlikely]]
    cow_before_write(id);
  std::uint64_t epoch = g_epoch.load(std::memory_order_relaxed);
  auto& d = g_regions[id].dirty_epoch;
  if (d.load(std::memory_order_relaxed) != epoch) d.store(epoch, std::memory_order_relaxed);
}

// A pointer a device operation may write through, to an extent gcr does not know: the region
// holding it, or the pinned host memory (Note [Device writes to pinned host memory]).
inline void mark_written(std::uint64_t addr) {
  if (addr - g_arena.base < g_arena.size)
    mark_device_written(addr);
  else
    host_written(addr, 0);
}

// Marks every region touching [addr, addr + bytes), device memory or pinned host memory.
inline void mark_range_written(std::uint64_t addr, std::uint64_t bytes) {
  if (bytes == 0) return;
  if (addr - g_arena.base >= g_arena.size) {
    host_written(addr, bytes);
    return;
  }
  std::uint64_t end = addr + bytes;
  mark_device_written(addr);
  for (std::uint64_t g = (addr & ~(kGranule - 1)) + kGranule; g < end; g += kGranule)
    mark_device_written(g);
}

// A read of addr: recorded for the first-touch order, and during an on-demand restore waits
// until its region has arrived. Hot path.
inline void touch_read(std::uint64_t addr) {
  std::uint64_t off = addr - g_arena.base;
  if (off >= g_arena.size) return;
  std::uint32_t id = g_arena.granule_region[off / kGranule].load(std::memory_order_relaxed);
  if (!id) return;
  note_touch(id);
  if (g_touch_waits.load(std::memory_order_relaxed)) [[unlikely]]
    cow_before_write(id);
}

inline void touch_range_read(std::uint64_t addr, std::uint64_t bytes) {
  if (bytes == 0) return;
  std::uint64_t end = addr + bytes;
  touch_read(addr);
  for (std::uint64_t g = (addr & ~(kGranule - 1)) + kGranule; g < end; g += kGranule) touch_read(g);
}

inline void mark_all_written() {
  host_written_anywhere();
  if (g_cow_active.load(std::memory_order_relaxed)) [[unlikely]]
    cow_before_write_all();
  g_all_dirty.store(true, std::memory_order_relaxed);
}

// The region manager's lock: held by allocation, free, park and unpark; never by launches.
extern RankedMutex g_region_mu;

// Reserves the arena on first use (needs a current context for the device query).
CUresult ensure_arena() GCR_REQUIRES(g_region_mu);
// Maps a new region of `size` bytes (a multiple of kGranule) on `device`; returns its id.
CUresult create_region(std::uint64_t size, std::uint32_t device, RegionKind kind, std::uint32_t* id)
    GCR_REQUIRES(g_region_mu);
// Unmaps and releases a region (the caller has drained the device work that may use it).
void destroy_region(std::uint32_t id) GCR_REQUIRES(g_region_mu);
// Registers a mapping the program made itself (its own cuMemMap) as a region; `allocation` is the
// VirtualAllocation it maps (0: a handle gcr does not virtualize).
std::uint32_t register_user_region(std::uint64_t address, std::uint64_t size, std::uint64_t offset,
                                   std::uint32_t device, std::uint32_t allocation)
    GCR_REQUIRES(g_region_mu);
// Gives an unmapped allocation of the program an arena address for a park (RegionKind::held): 0 if
// the arena is full. drop_held_regions forgets them all and gives their addresses back.
std::uint32_t register_held_region(std::uint64_t size, std::uint32_t device,
                                   std::uint32_t allocation) GCR_REQUIRES(g_region_mu);
void drop_held_regions() GCR_REQUIRES(g_region_mu);
// Forgets the program's mappings inside [address, address + size); returns the allocations they
// mapped (one entry per mapping).
std::vector<std::uint32_t> unregister_user_regions(std::uint64_t address, std::uint64_t size)
    GCR_REQUIRES(g_region_mu);
// The arena's free address ranges: carve (deterministic first fit) and give back.
bool arena_take(std::uint64_t size, std::uint64_t align, std::uint64_t* out)
    GCR_REQUIRES(g_region_mu);
void arena_give(std::uint64_t address, std::uint64_t size) GCR_REQUIRES(g_region_mu);
bool in_arena(std::uint64_t addr);

std::vector<std::uint32_t> live_region_ids() GCR_REQUIRES(g_region_mu);  // with g_region_mu held
// Marks a region as shared with other processes (with g_region_mu held).
void mark_region_shared(std::uint32_t id) GCR_REQUIRES(g_region_mu);
// Note [Shared memory written job-wide]
// A checkpoint of a job stores a shared allocation again only when some process may have written
// it since the last one: each view's dirty epoch, ORed over the job by gcrd. A communication
// kernel (Note [A consistent cut] in cut.h; NCCL's) writes through pointers stored in device
// memory, which its parameters do not show: it counts as writing every shared region. The ids
// ever shared are listed (kMaxSharedIds; past that every region counts as written), so the cost
// is one pass over them, paid by communication launches only.
inline constexpr std::uint32_t kMaxSharedIds = 4096;
void mark_shared_written();
// The region holding addr, or 0 (with g_region_mu held; any address, in the arena or not).
std::uint32_t region_id_at(std::uint64_t addr) GCR_REQUIRES(g_region_mu);
bool region_dirty(const Region& r, std::uint64_t since_epoch);

// The contexts the program has used (primary or created), for draining at quiesce.
void note_context(CUcontext ctx);
void forget_context(CUcontext ctx);
std::vector<CUcontext> known_contexts();

}  // namespace gcr::interpose
