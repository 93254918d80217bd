// The checkpoint protocol of DESIGN.md §4, as gcrd runs it for one process:
//
//   cut (quiesce) -> park -> new epoch -> CRIU dump with gcr's plugin (driver lock + checkpoint of
//   control state only) -> [--leave-running: driver restore + unlock by the plugin, then unpark,
//   soft copy-on-write begins, resume: the stall ends here] -> drain regions (drain.h) and CRIU's
//   images into the store -> commit the manifest.
//
// Note [CRIU run by someone else]
// Under a container runtime CRIU is runc's, and gcr's plugin asks gcrd at the first PAUSE_DEVICES
// to do its part (docs/containers.md). gcrd then cuts, quiesces and parks the tree's processes as
// for its own checkpoint, but stores their device memory *before* CRIU freezes anything: CRIU 4.2
// has no hook after its dump whose failure fails the dump, so a store failing afterwards would
// lose the memory of a process CRIU then kills. The checkpoint holds no CRIU images (META
// criu_images=external: they are in the runtime's images directory). Then the plugin goes on, and
// its exit hook says whether the dump succeeded; a failed one gets every process its memory back.
// What CRIU did with the tasks afterwards (-R or not) no plugin can read under runc (Note [Leave
// running] in criu_plugin/final_state.h), so gcrd watches: tasks that are gone were ended; tasks
// that run on, no longer traced, get their memory back and resume.
//
// --stop-copy is the baseline (cuda-checkpoint + CRIU): no parking; the driver copies device
// memory into the process and CRIU dumps it with the rest. A CUDA process not running under gcr is
// always checkpointed that way.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gcr/criu.h"
#include "gcr/result.h"
#include "gcr/store.h"
#include "proc_info.h"

namespace gcr::gcrd {

struct CheckpointRequest {
  pid_t pid = 0;
  // --job: the roots of the job's other process trees, checkpointed with pid's as one job (Note
  // [A job of several trees] in job.h).
  std::vector<pid_t> job_pids;
  std::optional<std::string> tag;
  bool leave_running = false;
  bool stop_copy = false;
  bool tcp_close = false;  // dump established TCP connections as closed instead of refusing
  std::chrono::milliseconds quiesce_timeout{10'000};
  // Set when CRIU is a container runtime's, reaching gcrd through gcr's CRIU plugin (Note [CRIU
  // run by someone else]): called once the device memory is stored, with the checkpoint's id; it
  // lets that CRIU go on and answers whether its dump succeeded.
  std::function<Result<bool>(const std::string& id)> external_criu;
  // A pre-copy round of `gcr migrate --container` (Note [Container migration] in
  // cli/cmd_migrate.cpp): with leave_running, the device memory is stored as for a runtime's CRIU
  // (criu_images=external) and no CRIU runs at all; the process runs on, as after any
  // --leave-running checkpoint (soft copy-on-write).
  bool device_only = false;
  // Set by `gcr migrate` for its last checkpoint (Note [Migration] in cli/cmd_migrate.cpp): once
  // the checkpoint is committed the stopped process waits; true ends it (the destination runs
  // it now), false gives it its memory back and lets it run on.
  // `heard` is called with each word of the client's that is news: "commit" (the process is the
  // destination's now), "running" (it runs there: Note [A rank moved while its job runs] in
  // job_move.h lets the rest of the job go on then).
  std::function<bool(const std::string& id, const std::function<void(const std::string&)>& heard)>
      hold;
  // A part of a job across hosts (Note [A job across hosts] in job_link.h): the other hosts are
  // met there; null for a job on this host alone.
  class JobLink* link = nullptr;
  // Ibid.: what follows a prepared checkpoint (default: its commit), and META it adds.
  std::function<Status(class CheckpointTransaction&)> decide;
  std::map<std::string, std::string> extra_meta;
};

struct CheckpointReport {
  pid_t pid = 0;
  std::string id;
  std::string kind;  // "gcr" or "stop-copy"
  std::map<std::string, std::uint64_t>
      times_ns;  // quiesce, park, dump, unpark, store, total, stall
  std::map<std::string, std::uint64_t> starts_ns;  // when each began, CLOCK_MONOTONIC
  std::uint64_t regions = 0, region_bytes = 0, dirty_bytes = 0;
  std::uint64_t processes = 1;       // the job's processes under gcr (Note [Job checkpoint])
  std::uint64_t shared_regions = 0;  // allocations they share, each stored once
  std::uint64_t cow_copies = 0;  // regions the process copied before writing them (--leave-running)
  std::uint64_t cow_waits = 0;   // regions a process waited for gcrd to read (no memory to copy,
                                 // or a shared allocation: Note [Shared memory behind every view])
  // Note [Host memory tracked between checkpoints] (host_tracking.h): the tasks whose writes are
  // tracked from this checkpoint on, and this dump's host pages taken from the process in the
  // freeze and (unchanged since the last checkpoint) from its images.
  std::uint64_t host_tracked_tasks = 0;
  std::uint64_t host_pages_from_process = 0, host_pages_from_parent = 0;
  // Pinned for DMA (so taken from the process whatever its protection said), of those tracked.
  std::uint64_t host_pages_pinned = 0;
  // Pinned for DMA and so copied while frozen, not written after the resume (--cow-dma).
  std::uint64_t host_pages_dma_frozen = 0;
  // Pinned for DMA by processes that write those pages before a device may (Note [Device writes
  // to pinned host memory] in interpose/pinned.h): tracked and written after the resume like the
  // rest of host memory.
  std::uint64_t host_pinned_touched_bytes = 0;
  // Written by the process while CRIU wrote the images after the resume, each saved first.
  std::uint64_t host_pages_saved = 0;
  std::map<std::string, std::uint64_t> stats;  // the manifest's STATS
  std::vector<std::string> warnings;           // the checkpoint is good, but the user should know
  // Note [Checkpoints in peers' memory] (memory_tier.h): a job's copies into peers' memory.
  unsigned peer_copies = 0, peer_copies_wanted = 0;
  std::string images_in;      // where CRIU wrote: "memory" or "disk" (Note [Dumping into memory])
  bool kept_running = false;  // external CRIU: the tasks ran on after the dump (else it ended them)
};

using Progress = std::function<void(const std::string& line)>;

// Each root is a process this gcrd may checkpoint: it exists and (unless gcrd is root) is its
// user's; else an error saying which.
Status check_roots(const std::vector<pid_t>& roots);

class WorkRegistry;
// `work` (optional): told what the checkpoint makes of each process as it goes (`gcr ps`).
Result<CheckpointReport> checkpoint_process(store::Store& store, const criu::Tools& tools,
                                            const CheckpointRequest& request,
                                            const Progress& progress, WorkRegistry* work = nullptr);

}  // namespace gcr::gcrd
