// What a process wrote in its host memory since its last checkpoint, kept by gcrd between
// checkpoints (Note [Host memory tracked between checkpoints]).
//
// Note [Host memory tracked between checkpoints]
// CRIU's incremental dumps need the kernel's soft-dirty bit, which this VM's kernel (and many
// others) lacks, so every live checkpoint used to copy all of a process's host memory in the
// freeze: 4 GiB took ~0.5 s frozen at every checkpoint, changed or not. gcr's CRIU carries
// --cow-track (scripts/criu-patches/0006-cow-track.patch): the userfaultfd with which --cow-dump
// write-protects the dumped memory at the cut outlives the dump. CRIU hands it to gcrd on a
// socket once the pages are written; gcrd keeps serving its faults (a first write to a page since
// the cut waits while gcrd lifts that page's protection: no copy) and hands it back to the next
// dump, with the previous dump's images directory as --prev-images-dir. A page still protected
// then was not written since: it is not spliced in the freeze but copied from the parent's images
// after the process runs again, so every dump still stands alone (and is stored whole: the store
// dedups what the parent already holds).
//
// What ends the tracking, so that the next checkpoint is a full one: a dump that fails (CRIU
// hands nothing back), a checkpoint that is not a live one, the process's exit, gcrd's exit (the
// userfaultfds close with it, which ends the protection; the process never waits on a dead gcrd).
// The price while it is held: a first write to a block of memory after a checkpoint costs one
// round trip to gcrd's thread, which lifts the protection of the whole block (2 MiB aligned,
// GCR_HOST_TRACK_BLOCK; halved where the block runs past the tracked memory), so the next dump
// takes the whole block from the process. Per page, a program rewriting its memory paid ~35 us a
// page on this 2-CPU VM (a step writing 8 MiB went from 25 to ~100 ms after each checkpoint,
// bench/ckpt_bench.py --host-writes 2048); per block it pays that per 2 MiB. Another process's
// write into a protected page (process_vm_writev, a debugger poking /proc/PID/mem) fails with
// EFAULT. GCR_CRIU_COW_TRACK=0 turns it off; kernels before 6.13 do not get it (mremap kept the
// protection of the pages it moved).
//
// Memory written without its page tables, by a device through pages pinned for DMA, keeps its
// protection: it would read as unchanged and be taken from the parent. A 1.5 interposer writes
// each such page itself before a device operation may (Note [Device writes to pinned host
// memory] in interpose/pinned.h), so the fault comes first and pinned memory is tracked like the
// rest (host_dma_reply's touched flag). Otherwise (a 1.4 interposer, or GCR_PINNED_FROZEN=1 for a
// program whose kernels write pinned memory through pointers stored in device memory): what the
// program pinned through the driver (cuMemHostAlloc, cuMemAllocHost, cuMemHostRegister, and
// registered ranges unregistered since) the interposer reports (protocol 1.4, host_dma), and
// hand_in() lifts its protection while the process is parked (its GPU work drained, so no DMA is
// under way): CRIU takes those pages from the process at every checkpoint. A process whose
// interposer cannot say (1.3, or more ranges than it keeps) is not tracked if it registered any.
// Not seen at all: other DMA writers (RDMA regions, io_uring fixed buffers the kernel fills).
// simgpu's copies are CPU writes, which fault anyway. The same DMA would also change a pinned page
// spliced into CRIU's pipes before --cow-dump writes it after the resume: without the 1.5 rule
// gcrd hands CRIU the same ranges (--cow-dma, 0007-cow-dma.patch), whose pages it copies in the
// freeze instead.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gcr/control.h"
#include "gcr/result.h"
#include "gcr/unique_fd.h"
#include "lineage.h"
#include "work_dir.h"

namespace gcr::gcrd {

class HostTracking;

// What CRIU's log (-v3) says a --cow-track dump took: pages spliced from the processes in the
// freeze, and pages unchanged since the previous dump, copied from its images afterwards;
// (--cow-dma) pages a device may write, copied in the freeze; and (--cow-dump) pages the
// processes wrote while CRIU wrote the images, saved before each write.
struct HostPages {
  std::uint64_t from_process = 0, from_parent = 0, dma = 0, saved = 0;
};
HostPages read_host_pages(const std::filesystem::path& dump_log);

// One live checkpoint's side of the tracking, from before CRIU starts until it has ended.
class TrackedDump {
 public:
  TrackedDump(TrackedDump&&) noexcept;
  TrackedDump& operator=(TrackedDump&&) = delete;
  TrackedDump(const TrackedDump&) = delete;
  ~TrackedDump();  // without commit(): the tracking of the process ends

  // CRIU's end of the socket (--cow-track), and the previous dump's images (--prev-images-dir)
  // when there is one to take unchanged pages from.
  int criu_socket() const { return criu_end_.get(); }
  const std::optional<std::filesystem::path>& parent_images() const { return parent_; }
  // Hands the previous dump's userfaultfds to CRIU (started before or after this call, with
  // criu_socket()), which takes them over once it has frozen the process: gcrd serves them until
  // then, so that nothing waits unserved, and stops when CRIU says it takes them (CRIU waits for
  // that before it changes any protection).
  // `dma`: per task (pid), host memory a device may have written past the page tables, whose
  // protection is lifted first (a range partly outside the tracked memory is lifted where it is
  // tracked); `lifted_pages` counts them.
  Status hand_in(const std::map<pid_t, std::vector<control::HostDmaRange>>& dma,
                 std::uint64_t* lifted_pages);
  // After CRIU's dump succeeded: the userfaultfds it handed back (served since) and its images
  // (`images`, which this keeps) are what the next dump starts from. How many tasks are tracked.
  std::size_t commit(WorkDir images);

 private:
  friend class HostTracking;
  TrackedDump(HostTracking* owner, ProcessKey key, std::uint64_t session);
  HostTracking* owner_;
  ProcessKey key_;
  std::uint64_t session_;
  UniqueFd criu_end_;
  std::optional<std::filesystem::path> parent_;
  bool handed_in_ = false;
  bool committed_ = false;
};

class HostTracking {
 public:
  static HostTracking& instance();
  // For a live checkpoint of `key`'s tree by a CRIU that has --cow-track.
  Result<TrackedDump> begin(const ProcessKey& key);
  // Ends the tracking of `key`'s tree, if any: its protection ends, its images go.
  void forget(const ProcessKey& key);

  struct State;

 private:
  friend class TrackedDump;
  HostTracking();
  std::unique_ptr<State> state_;
};

}  // namespace gcr::gcrd
