// The checkpoint protocol of DESIGN.md §4, as gcrd runs it for one process:
//
//   cut (quiesce) -> park -> new epoch -> CRIU dump with gcr's plugin (driver lock + checkpoint of
//   control state only) -> [--leave-running: driver restore + unlock by the plugin, then unpark,
//   soft copy-on-write begins, resume: the stall ends here] -> drain regions (drain.h) and CRIU's
//   images into the store -> commit the manifest.
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

namespace gcr::gcrd {

struct CheckpointRequest {
  pid_t pid = 0;
  std::optional<std::string> tag;
  bool leave_running = false;
  bool stop_copy = false;
  bool tcp_close = false;  // dump established TCP connections as closed instead of refusing
  std::chrono::milliseconds quiesce_timeout{10'000};
  std::uint64_t snapshot_budget_bytes = ~0ull;  // spare device memory for --leave-running copies
};

struct CheckpointReport {
  pid_t pid = 0;
  std::string id;
  std::string kind;  // "gcr" or "stop-copy"
  std::map<std::string, std::uint64_t>
      times_ns;  // quiesce, park, snapshot, dump, unpark, store, total, stall
  std::map<std::string, std::uint64_t> starts_ns;  // when each began, CLOCK_MONOTONIC
  std::uint64_t regions = 0, region_bytes = 0, dirty_bytes = 0;
  std::uint64_t processes = 1;       // the job's processes under gcr (Note [Job checkpoint])
  std::uint64_t shared_regions = 0;  // allocations they share, each stored once
  std::uint64_t cow_copies = 0;  // regions the process copied before writing them (--leave-running)
  std::uint64_t cow_waits = 0;   // regions the process waited for gcrd to read (no memory to copy)
  std::map<std::string, std::uint64_t> stats;  // the manifest's STATS
  std::vector<std::string> warnings;           // the checkpoint is good, but the user should know
  std::string images_in;  // where CRIU wrote: "memory" or "disk" (Note [Dumping into memory])
};

using Progress = std::function<void(const std::string& line)>;

Result<CheckpointReport> checkpoint_process(store::Store& store, const criu::Tools& tools,
                                            const CheckpointRequest& request,
                                            const Progress& progress);

// The uid that owns pid (its /proc entry), or (uid_t)-1 if it is gone.
uid_t process_owner(pid_t pid);

// The command line of pid, NUL-separated as in /proc; empty if unreadable.
std::string process_cmdline(pid_t pid);

}  // namespace gcr::gcrd
