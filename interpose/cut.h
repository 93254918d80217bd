// Note [A consistent cut]
// The ranks of a job talk through shared device memory: a kernel of one rank spins on a flag that
// a kernel of its peer sets. Quiescing them one by one can hang (rank A's kernel waits for a
// kernel that rank B, already quiesced, never launches), and so can draining them all at once
// when B had not launched yet. So gcrd cuts a job where every *communication launch* has been
// issued on all sides or on none:
// - A communication launch is a kernel launch with a parameter word pointing into a shared region
//   (Region::shared), or one of a kernel named as communication (NCCL's `ncclDevKernel_*`, and the
//   names in GCR_COMM_KERNELS, comma-separated substrings); and a stream memory operation (write,
//   wait, or a batch of them) on shared memory or on host memory: a peer's stream may wait on the
//   write, or the wait on a peer's write, with no kernel between them, and a value in host memory
//   may be relayed to a peer by a thread of the process (a socket transport's proxy: Note [TCP
//   within a job] in daemon/job_tcp.h). Each process counts them: `admitted`
//   when let through the count, `issued` once the driver has them.
// - The counts are compared across the job, so the ranks must count the same launches from their
//   start: memory is shared (exported and imported) before any launch communicates through it, as
//   NCCL's init and PyTorch's handle exchange do. A launch on memory its owner has not exported
//   yet is not counted there, while its peer counts the same launch.
// - cut(begin) holds every launch past those already admitted (before the API gate's scope, so
//   that synchronisation and helper threads run on, and quiesce can still close the gate) and
//   reports the count; gcrd takes T, the largest count of the job, and sets every process's
//   target to T: laggards run on to T and are held at T + 1. When every process has issued T, no
//   issued kernel waits for a peer's kernel that is not issued too, and the job drains.
// - cut(end), or the end of gcrd's session, lets the held launches go (after a quiesce they then
//   wait at the closed gate).
// The hot path pays one relaxed load while the process shares nothing; a process that shares
// memory scans a launch's parameters once more, and takes two atomic adds per communication launch.
#pragma once

#include <atomic>
#include <cstdint>

#include "gcr/control.h"

namespace gcr::interpose {

// True once any region of the process has been shared (sticky): only then are launches checked.
extern std::atomic<bool> g_comm_possible;

// A slab region shared through cuIpcGetMemHandle holds other allocations too: only a pointer into
// the allocation given out makes a launch a communication launch. Immutable snapshots (readers
// never lock); shared_range_add replaces it with g_region_mu held, and old snapshots are kept.
struct SharedRange {
  std::uint64_t begin, end;
};
bool in_shared_range(std::uint64_t address) noexcept;
void shared_range_add(std::uint64_t begin, std::uint64_t end);

// A kernel name that is a communication kernel by configuration (NCCL's, GCR_COMM_KERNELS).
bool comm_kernel_name(const char* name);

// Waits while a cut holds launches past its target, then counts this one admitted.
void cut_admit() noexcept;

// Counts an admitted communication launch issued (whatever the driver answered).
extern std::atomic<std::uint64_t> g_comm_issued;
inline void cut_issued() noexcept {
  g_comm_issued.fetch_add(1, std::memory_order_seq_cst);
}

control::CutCounts op_cut(control::CutOp op, std::uint64_t value);

}  // namespace gcr::interpose
