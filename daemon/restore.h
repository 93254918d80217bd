// The restore protocol of DESIGN.md §5: gcrd allocates every region on the target device first (a
// restore that cannot get its memory fails before the process exists) and starts loading them
// (loader.h), CRIU restores the process with gcr's plugin (driver restore onto the mapped GPUs +
// unlock) meanwhile, and the process unparks: it maps gcrd's allocations at its original
// addresses and runs, waiting only for regions it touches before they have arrived (Note
// [On-demand restore] in gcr/cow_table.h). With `eager`, everything is loaded before CRIU runs.
// A load that fails after the process exists (a chunk found corrupt) kills the restored process:
// it never runs on bytes it did not get. --stop-copy images restore the baseline way (CRIU brings
// the device memory back in the process's pages and the driver copies it to the GPU). The phases,
// their undos and the invariants: Note [Restore phases] in restore_txn.h.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "gcr/unique_fd.h"

namespace gcr::gcrd {

struct RestoreRequest {
  std::string name;               // tag or id
  std::optional<int> device;      // restore every GPU of the checkpoint onto this one
  std::map<int, int> device_map;  // or each onto another (every GPU it used named)
  bool eager = false;             // load all device memory before CRIU (default: on demand)
  // The checkpoint (name: its full id) is still arriving from a bucket (gcr/store.h,
  // open_checkpoint): chunks not yet in the store are waited for as they are read.
  bool arriving = false;
  // Restore into a PID namespace of its own. Also chosen when the checkpoint's pid is in use (the
  // original still runs, or another restore of the same image does).
  bool new_pid_namespace = false;
  // Files the restoring user hands the process in place of connections the image names (criu
  // --inherit-fd KEY, gcr/process_tree.h): its terminal or pipes, the logs it appends to.
  struct Inherited {
    std::string key;
    UniqueFd fd;
  };
  std::vector<Inherited> inherit;
  // Checks CRIU's images once they are on disk, before CRIU runs (a restore for another host:
  // Note [Who a peer may run] in gcr/criu_creds.h).
  std::function<Status(const std::filesystem::path& images)> check_images;
  // Who asks: anyone but root restores only checkpoints whose META owner_uid is theirs.
  uid_t client_uid = 0;
  // Set when CRIU is a container runtime's (Note [CRIU run by someone else] in checkpoint.h): once
  // the device memory is allocated and loading, it lets that CRIU go on and returns the pid of the
  // root of the tasks it restored, after its restore ended well.
  std::function<Result<pid_t>()> external_criu;
  // A part of a job across hosts (Note [A job across hosts] in job_link.h): its trees wait, their
  // connections locked, until every host has restored its own.
  class JobLink* link = nullptr;
  // Ibid., on a replacement host: the addresses of the part's connections are taken first (Note
  // [Addresses that move with a rank] in address_takeover.h).
  bool take_addresses = false;
  // A clone's network namespace (Note [A clone's network] in clone_network.h): the restore runs
  // there; it goes with new_pid_namespace (criu::restore refuses it alone). Empty: gcrd's.
  std::filesystem::path netns;
  std::string hostname;  // ibid.: a UTS namespace of its own with this hostname
};

struct RestoreReport {
  pid_t pid = 0;                 // as gcrd sees it
  pid_t original_pid = 0;        // the checkpoint's: the process's pid inside its namespace
  std::vector<pid_t> tree_pids;  // a job of several trees: the roots of the others (job.h)
  std::vector<std::string> warnings;
  bool new_pid_namespace = false;
  std::string id;
  std::string kind;
  std::uint64_t region_bytes = 0;
  std::uint64_t wanted_regions = 0;    // regions the process waited for (on demand)
  std::uint64_t store_read_bytes = 0;  // device memory read from the store
  std::uint64_t shared_bytes = 0;      // device memory taken from a concurrent restore's reads
  std::uint64_t staged_bytes = 0;      // device memory on the GPU already (Note [Staged restore])
  bool lazy_host = false;  // host memory came in after the process ran (gcr/criu.h, lazy pages)
  // ... served by gcrd from the store (host_pages.h), not read by CRIU from the images: how much
  bool host_from_store = false;
  std::uint64_t host_served_bytes = 0;
  // allocate, load, materialize, criu, unpark, host (lazy host memory: CRIU's start -> all in);
  // resume (restore start -> process running), full (restore start -> all device and host memory
  // in), total
  std::map<std::string, std::uint64_t> times_ns;
  std::map<std::string, std::uint64_t> starts_ns;  // when each began, CLOCK_MONOTONIC
};

// "0=1,1=0": FROM=TO ordinals; each FROM and each TO once.
Result<std::map<int, int>> parse_device_map(const std::string& text);

// Waits until none of pids is a restored process whose host memory is still coming in (Note [Host
// memory restored lazily] in gcr/criu.h); busy after `timeout`.
Status wait_host_memory_restored(const std::vector<pid_t>& pids, std::chrono::seconds timeout,
                                 const Progress& progress);

Result<RestoreReport> restore_checkpoint(store::Store& store, const criu::Tools& tools,
                                         const RestoreRequest& request, const Progress& progress);

}  // namespace gcr::gcrd
