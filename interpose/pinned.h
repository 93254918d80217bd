// Note [Device writes to pinned host memory]
// A device writes host memory the program pinned through the driver (cuMemHostAlloc,
// cuMemAllocHost, cuMemHostRegister) by DMA, past the page tables. gcr keeps host memory out of
// the freeze with write protection (Note [Pages written after the resume] in gcr/criu.h; Note
// [Host memory tracked between checkpoints] in daemon/host_tracking.h): a page protected
// at the cut is copied by CRIU before the program's first write to it, and a page still protected
// at the next cut was not written since. A DMA write sees neither: it could change a page in
// CRIU's pipe before CRIU wrote it, or leave a written page looking unchanged. Until protocol 1.4
// gcrd therefore had CRIU copy pinned memory in the freeze and take it from the process at every
// checkpoint, which costs the freeze what the program pinned.
//
// The interposer sees every device write it can reason about (copies and memsets by their
// destination, kernels by their pointer parameters, everything for what it cannot see into: graph
// launches, batched memory operations, kernels of unknown layout). Before it enqueues one that
// may write pinned memory, it writes each page the device may write itself, from the calling
// thread, with an atomic add of zero: a page still protected faults, and the fault is served
// (CRIU saves the page, or gcrd marks it written) before the device can get there. So pinned
// memory is tracked and copied on write like any other host memory, and gcrd no longer copies it
// in the freeze (host_dma_reply's flag kHostDmaTouched, protocol 1.5).
//
// When: every range is armed at each checkpoint's new epoch (the process parked, the cut about to
// write-protect its memory) and when it is pinned after one (memory registered now may have been
// protected since); each page is written once per arming, and a range is disarmed once all of its
// pages have been. A restored process (another start time) disarms at unpark: CRIU gave its
// memory back unprotected. A device
// operation pays one relaxed load when nothing is armed, two more for an address outside every
// armed range. A kernel parameter that points into a pinned range counts
// as writing the whole range (a kernel may index past the pointer). What may write anywhere (a
// graph launch, batched memory operations, a kernel of unknown layout, a communication kernel,
// which writes through pointers stored in device memory, GCR_TRACK=conservative) writes every
// armed page once and makes the process answer without the flag from then on: gcrd then copies
// its pinned memory in the freeze, as before 1.5. Not seen: other kernels writing through stored
// pointers (the same limit as write tracking of device memory; GCR_PINNED_FROZEN=1 in gcrd's
// environment), other DMA writers (RDMA, io_uring fixed buffers). Ranges that are not mapped
// writable at arming (memory unmapped without an unregister) are not written.
#pragma once

#include <atomic>
#include <cstdint>

namespace gcr::interpose {

// How many ranges may still hold protected pages.
extern std::atomic<std::uint32_t> g_pinned_armed;
// A device operation whose writes gcr cannot see has run (sticky).
extern std::atomic<bool> g_pinned_unseen;

// Slow paths: bytes 0 means the whole range holding addr.
void pinned_before_write(std::uint64_t addr, std::uint64_t bytes) noexcept;
void pinned_before_write_all() noexcept;

// A device operation may write [addr, addr + bytes) of host memory (bytes 0: as much of the
// pinned range holding addr as there is). Hot path.
inline void host_written(std::uint64_t addr, std::uint64_t bytes) {
  if (g_pinned_armed.load(std::memory_order_relaxed) != 0) [[unlikely]]
    pinned_before_write(addr, bytes);
}

// A device operation that may write anywhere (a graph, batched memory operations, a kernel of
// unknown layout or one that writes through stored pointers, as NCCL's do): its pages are written
// now where armed, and from now on the process says it cannot vouch for its pinned memory, so
// gcrd copies it in the freeze (the 1.4 care). Hot path when already said.
void pinned_unseen_write() noexcept;
inline void host_written_anywhere() {
  if (!g_pinned_unseen.load(std::memory_order_relaxed) ||
      g_pinned_armed.load(std::memory_order_relaxed) != 0) [[unlikely]]
    pinned_unseen_write();
}
bool pinned_writes_seen() noexcept;

// Memory pinned for DMA, from the allocation wrappers; read-only and I/O memory registrations are
// never written through.
void pinned_add(std::uint64_t address, std::uint64_t bytes);
void pinned_remove(std::uint64_t address);
// A new cut (a checkpoint's epoch, the process parked): every range may hold protected pages.
void pinned_arm() noexcept;
// At unpark: a restored process's memory is not protected, whatever state came back with it.
void pinned_check_incarnation() noexcept;

}  // namespace gcr::interpose
