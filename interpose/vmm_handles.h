// Note [Virtual allocation handles]
// - The handles the program gets from cuMemCreate, cuMemRetainAllocationHandle and
//   cuMemImportFromShareableHandle are gcr's values (kVirtualHandleTag | id), translated in every
//   call that takes one. Each names a VirtualAllocation: the real handle gcr holds (one driver
//   reference, 0 while parked), the properties the program asked for (without the POSIX-fd type
//   gcr adds so that it can park the memory), the program's reference count (create, import and
//   each retain +1, each release -1) and how many regions map it.
// - The memory lives while the program holds a reference or a mapping: gcr releases its real
//   handle when both are gone, as the driver would have freed it.
// - Park exports each allocation once and releases gcr's real handle, so afterwards the driver
//   holds none of the program's memory (the program's own handle used to keep a second copy
//   alive, which a driver checkpoint then saved and restored beside gcr's). Unpark imports it
//   back and maps it at the same address; the program's handle values never change.
// - cuMemAlloc memory (slabs and large regions) keeps cuMemAlloc's semantics: retaining a handle
//   for it fails, as it does on a driver for memory that cuMemMap did not map.
// - Memory exported to or imported from another process is a region of the job (Note [Shared
//   regions] below). What gcr cannot yet checkpoint correctly is a *blocker* (`gcr checkpoint`
//   refuses before it stops anything, park refuses too): a driver's own IPC handle, IPC events,
//   pool export, an allocation mapped at two addresses (restored, each mapping would be memory of
//   its own), shared memory mapped nowhere. An allocation held but mapped nowhere parks under an
//   arena address of its own for the park's duration (RegionKind::held). FABRIC handles and
//   multicast are refused at creation, and their device attributes read 0, which makes PyTorch and
//   NCCL fall back to POSIX fds and no multicast.
// All of it runs with g_region_mu held; none of it is on the launch path.
//
// Note [Shared regions]
// Memory shared between the processes of a job is checkpointed as one region of the job
// (gcrd's job checkpoint, daemon/job.h). To find one allocation in every process that maps
// it, each process keeps *share keys* for what it shares: the identity (st_dev, st_ino) of every
// fd it exported for the allocation (cuMemExportToShareableHandle, the fd behind a cuIpc token),
// or of the fd it imported. A peer that imported an fd holds the same file the exporter handed
// out, so gcrd joins the processes' regions where their keys meet. Park releases every view; an
// unpark gives each view the fd gcrd chose for the allocation, and its identity becomes the key of
// every view (so keys still meet after a restore). Protocol `shares` reports them.
// An allocation shared but mapped nowhere is a blocker (it has no address a restore could use).
#pragma once

#include <cuda.h>
#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <vector>

#include "regions.h"

namespace gcr::interpose {

inline constexpr std::uint64_t kVirtualHandleTag = 0x6763'7200'0000'0000ull;  // "gcr\0"
inline constexpr std::uint64_t kVirtualHandleTagMask = 0xffff'ff00'0000'0000ull;

enum class AllocationOrigin : std::uint8_t { created, imported };

struct VirtualAllocation {
  CUmemGenericAllocationHandle real = 0;  // gcr's driver reference; 0 while parked
  CUmemAllocationProp prop{};             // as the program asked for it
  std::uint64_t size = 0;
  std::uint32_t program_refs = 0;
  std::uint32_t mappings = 0;
  AllocationOrigin origin = AllocationOrigin::created;
  bool exported = false;  // a shareable handle was given out: other processes may map it
  std::vector<std::uint64_t> share_keys;  // Note [Shared regions]; the latest kMaxShareKeys
};

// The identity of the file behind fd, as a share key (0 if fstat fails).
std::uint64_t share_key_of_fd(int fd);
// Adds a key (once), dropping the oldest past the protocol's limit.
void add_share_key(std::vector<std::uint64_t>& keys, std::uint64_t key);
// Marks every region mapping the allocation as shared.
void valloc_mark_shared(std::uint32_t id) GCR_REQUIRES(g_region_mu);

inline bool is_virtual_handle(CUmemGenericAllocationHandle h) {
  return (h & kVirtualHandleTagMask) == kVirtualHandleTag;
}

// A new allocation holding `real`, with one program reference; returns its handle.
CUmemGenericAllocationHandle valloc_add(CUmemGenericAllocationHandle real, std::uint64_t size,
                                        const CUmemAllocationProp& prop, AllocationOrigin origin)
    GCR_REQUIRES(g_region_mu);
// The allocation a handle names (null for a stale or foreign value), and by id.
VirtualAllocation* valloc_find(CUmemGenericAllocationHandle handle) GCR_REQUIRES(g_region_mu);
VirtualAllocation* valloc_by_id(std::uint32_t id) GCR_REQUIRES(g_region_mu);
std::uint32_t valloc_id(CUmemGenericAllocationHandle handle) GCR_REQUIRES(g_region_mu);
CUmemGenericAllocationHandle valloc_handle(std::uint32_t id) GCR_REQUIRES(g_region_mu);
// Releases the real handle and forgets the allocation once nothing holds or maps it.
void valloc_release_if_unused(std::uint32_t id) GCR_REQUIRES(g_region_mu);

// The allocations the program holds that are mapped nowhere (they park as RegionKind::held).
std::vector<std::uint32_t> valloc_unmapped() GCR_REQUIRES(g_region_mu);

// What stands in the way of a checkpoint now (Note [Virtual allocation handles]).
std::vector<std::string> valloc_blockers() GCR_REQUIRES(g_region_mu);

// Sharing through CUDA IPC and memory pools, counted by the wrappers in ipc.cpp and
// ipc_memory.cpp (Note [IPC memory under gcr]).
inline constexpr const char* kExportedMemoryBlocker =
    "device memory was exported to other processes with cuIpcGetMemHandle";
inline constexpr const char* kOpenedMemoryBlocker =
    "the process maps another process's device memory (cuIpcOpenMemHandle)";
void note_ipc_blocker(const char* what);
void forget_ipc_blocker(const char* what);  // one use of `what` ended
// The share keys of a region exported through cuIpcGetMemHandle (none: not exported), and their
// refresh at unpark (Note [Shared regions]: a region never exported is left alone); park closes
// the cached export fds.
std::vector<std::uint64_t> ipc_export_keys(std::uint32_t region_id);
void ipc_set_export_key(std::uint32_t region_id, std::uint64_t key);
void ipc_close_exports();
void ipc_reopen_exports();  // at unpark, once the regions have their handles again
std::vector<std::string> ipc_blockers();
std::size_t ipc_memory_opened();                  // other processes' memory mapped here now
void ipc_forget_region(std::uint32_t region_id);  // closes its IPC export, as the region goes

}  // namespace gcr::interpose
