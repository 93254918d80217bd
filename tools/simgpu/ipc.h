// Interprocess memory and events (Note [Shared device memory] in simgpu.h): the layout of the
// 64-byte handles simgpu hands out, and the shared state behind a CU_EVENT_INTERPROCESS event.
//
// A handle names a memfd of the exporting process by (pid, fd number, inode): the importer opens
// /proc/<pid>/fd/<fd> and accepts it only if the inode matches, so a reused pid or fd number is
// refused instead of mapping another file. Opening /proc/<pid>/fd needs the ptrace read access a
// same-user process has (not the attach access pidfd_getfd needs, which Yama can deny). A handle
// is valid while the exporter lives and holds the memfd; it does not survive a driver checkpoint
// of the exporter (which refuses while an importer maps it).
#pragma once

#include <atomic>
#include <cstdint>

#include "simgpu.h"

namespace gcr::simgpu {

inline constexpr char kIpcMemMagic[8] = {'S', 'G', 'I', 'P', 'C', 'M', '1', 0};
inline constexpr char kIpcEventMagic[8] = {'S', 'G', 'I', 'P', 'C', 'E', '1', 0};

// CUipcMemHandle: a cuMemAlloc allocation, as a range of the exporter's heap memfd.
struct IpcMemHandle {
  char magic[8];
  std::int32_t pid;           // the exporting process
  std::int32_t fd;            // its heap memfd
  std::uint64_t inode;        // of that memfd
  std::uint64_t offset;       // the allocation in the memfd
  std::uint64_t size;         // its size (a multiple of kHeapAlign)
  std::uint64_t alloc_id;     // HeapAlloc::buffer_id: memory freed and reallocated at the same
                              // address gets a handle of its own
  std::int32_t device;        // the physical GPU it lives on
  std::uint8_t reserved[12];  // zero
};
static_assert(sizeof(IpcMemHandle) == CU_IPC_HANDLE_SIZE);

// CUipcEventHandle: the memfd holding the event's SharedEventState.
struct IpcEventHandle {
  char magic[8];
  std::int32_t pid;
  std::int32_t fd;
  std::uint64_t inode;
  std::uint8_t reserved[40];  // zero
};
static_assert(sizeof(IpcEventHandle) == CU_IPC_HANDLE_SIZE);

// An interprocess event: every record, in any process holding it, takes the next generation;
// its completion (the recording stream reaching it) raises `completed` to at least that
// generation and wakes waiters on the futex word `wake` (a shared futex: waiters may be other
// processes). The event is complete when completed >= recorded; a wait captures `recorded` when
// it is issued, as cuStreamWaitEvent captures the event's most recent record.
struct SharedEventState {
  static constexpr std::uint32_t kMagic = 0x56455349;  // "ISEV"
  std::uint32_t magic;
  std::atomic<std::uint32_t> wake;
  std::atomic<std::uint64_t> recorded;
  std::atomic<std::uint64_t> completed;
};
inline constexpr std::size_t kSharedEventBytes = 4096;

CUresult create_shared_event(CUevent_st* e);
CUresult open_shared_event(const IpcEventHandle& h, CUevent_st* e);
void close_shared_event(CUevent_st* e);
void complete_shared_event(SharedEventState* s, std::uint64_t generation);
bool shared_event_reached(const SharedEventState* s, std::uint64_t generation);
void wait_shared_event(SharedEventState* s, std::uint64_t generation);

}  // namespace gcr::simgpu
