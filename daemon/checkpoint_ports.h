// What a checkpoint transaction (checkpoint_txn.h) does to the world, behind narrow interfaces:
// the members' control sessions, the keepers, CRIU, and the device memory gcrd holds. gcrd's
// implementations (checkpoint_ports.cpp) call the real thing; tests/unit/transaction fakes them,
// so that the phases and their undos run as an unprivileged user in milliseconds.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gcr/control.h"
#include "gcr/cow_table.h"
#include "gcr/result.h"
#include "gcr/store.h"
#include "held_memory.h"

namespace gcr::gcrd {

using Progress = std::function<void(const std::string& line)>;

// The store, as a checkpoint writes it.
class CheckpointStore {
 public:
  virtual ~CheckpointStore() = default;
  virtual Result<std::unique_ptr<store::CheckpointWriter>> begin(
      const std::map<std::string, std::string>& meta,
      const std::optional<store::CheckpointId>& parent) = 0;
  // The parent's manifest, if it can be read.
  virtual std::optional<store::Manifest> manifest(const store::CheckpointId& id) = 0;
  virtual Status remove(const store::CheckpointId& id) = 0;
};

// A local or staged store::Store.
class StoreOf final : public CheckpointStore {
 public:
  explicit StoreOf(store::Store& store) : store_(store) {}
  Result<std::unique_ptr<store::CheckpointWriter>> begin(
      const std::map<std::string, std::string>& meta,
      const std::optional<store::CheckpointId>& parent) override {
    return store_.begin_checkpoint(meta, parent);
  }
  std::optional<store::Manifest> manifest(const store::CheckpointId& id) override {
    auto m = store_.read_manifest(id);
    if (!m) return std::nullopt;
    return std::move(m).value();
  }
  Status remove(const store::CheckpointId& id) override { return store_.remove(id); }

 private:
  store::Store& store_;
};

// The control sessions of a job's members (Note [Job checkpoint] in job.h), member 0 the root.
// A session is open from the start until close(); reopen() connects again (after the dump).
class JobSessions {
 public:
  virtual ~JobSessions() = default;
  virtual std::size_t size() const = 0;
  virtual pid_t pid(std::size_t member) const = 0;

  // Brings the members that share memory to a consistent cut (job.h reach_cut); end_cut lets
  // the launches it held go (they then meet the closed gate).
  virtual Status cut(std::chrono::milliseconds timeout, const Progress& progress) = 0;
  virtual void end_cut() = 0;
  // Every member at once; on a failure the others are resumed.
  virtual Status quiesce(std::chrono::milliseconds timeout) = 0;
  virtual Status resume(std::size_t member) = 0;
  virtual Result<std::vector<control::ParkedRegion>> park(std::size_t member) = 0;
  virtual Status unpark(std::size_t member, const std::vector<control::ParkedRegion>& regions) = 0;
  virtual Result<std::vector<std::uint64_t>> touch_order(std::size_t member) = 0;
  virtual Result<control::HostDmaRanges> host_dma(std::size_t member) = 0;
  virtual Status new_epoch(std::size_t member, const std::string& checkpoint_id) = 0;
  virtual Status close(std::size_t member) = 0;
  virtual Status reopen(std::size_t member) = 0;
  virtual bool is_open(std::size_t member) const = 0;
  // With the session closed: undoes a driver lock a dead CRIU may have left, connects, gives the
  // regions back, resumes, and closes again. False when the process could not be reached.
  virtual bool give_back(std::size_t member, const std::vector<control::ParkedRegion>& regions) = 0;
  // After a --leave-running dump: the process must be able to make CUDA calls again; true when
  // gcrd had to restore and unlock it (the plugin left it locked).
  virtual Result<bool> ensure_running(std::size_t member) = 0;
  // Soft copy-on-write (gcr/cow_table.h) on an open session.
  virtual Status cow_begin(std::size_t member, int table_fd, std::uint32_t entries) = 0;
  virtual Result<std::unique_ptr<HeldMemory>> cow_take(std::size_t member, std::uint32_t index,
                                                       std::uint64_t size) = 0;
  virtual Status cow_end(std::size_t member) = 0;
  // The process has exited, or its pid names another process now (its copies in flight are still
  // gcrd's: Note [Copies handed over]).
  virtual bool gone(std::size_t member) const = 0;
};

// Note [Parked memory outlives gcrd] (keeper.h): one keeper per parked member.
class Keepers {
 public:
  virtual ~Keepers() = default;
  virtual Status start(pid_t pid, const std::vector<control::ParkedRegion>& parked,
                       const std::vector<pid_t>& stopped_roots) = 0;
  virtual void done() = 0;         // every member has its memory back, or is gone
  virtual void abandon() = 0;      // let go without done: each gives its member's memory back
  virtual void handed_over() = 0;  // Note [Migration]: a gcrd that dies now ends the process
  virtual void kept() = 0;         // the destination refused it: give it back after all
};

// Pinned host memory (Note [Host memory tracked between checkpoints], host_tracking.h).
struct PinnedHostMemory {
  std::map<pid_t, std::vector<control::HostDmaRange>> ranges;
  pid_t untrackable = 0;  // a member that cannot say where it pinned memory
  std::uint64_t touched_bytes = 0;
};

// What a dump left behind for the transaction to finish.
struct DumpOutcome {
  bool left_stopped = false;  // the trees wait stopped (SIGCONT lets them go on)
};

// CRIU's part of a checkpoint, one strategy per mode: gcr's own dump (one tree or a job of
// several), or none (a runtime's CRIU dumps after the commit, or a device-only round).
class Dumper {
 public:
  virtual ~Dumper() = default;
  // "memory", "disk" or "runtime" (Note [Dumping into memory]).
  virtual std::string images_in() const = 0;
  // The image directory, CRIU started and ready to freeze (Note [CRIU started before the cut]):
  // whether CRIU was started now (else it starts at dump()).
  virtual Result<bool> prepare(const PinnedHostMemory& pinned, const Progress& progress) = 0;
  // Ends a started CRIU before it froze anything.
  virtual void cancel() = 0;
  // Whether the dump needs the pinned host memory asked again once the GPU is idle; then, with
  // the GPU parked, what it is now (nullptr: unknown: copy all of it, track nothing).
  virtual bool wants_pinned() const = 0;
  virtual Status pinned_known(const PinnedHostMemory* pinned) = 0;
  // Freezes and dumps. On failure nothing is left stopped and tracking ends.
  virtual Result<DumpOutcome> dump(const PinnedHostMemory& pinned,
                                   std::uint64_t* pinned_lifted) = 0;
  // Lets every tree the dump left stopped go on.
  virtual void continue_trees() = 0;
  // The processes run again (-R): what the dump may tidy now, out of the stall, while the keepers
  // still cover gcrd's death (gcr's CRIU: its TCP lock's chain, open since the dump, removed).
  virtual void after_resume() {}
  // Waits for a CRIU still writing host memory after the resume (--cow-dump): whether there was
  // one to wait for.
  virtual Result<bool> finish() = 0;
  // CRIU's images into the checkpoint, and what its log says of host pages.
  struct Stored {
    std::uint64_t from_process = 0, from_parent = 0, dma = 0, saved = 0, tracked_tasks = 0;
  };
  virtual Result<Stored> store(store::CheckpointWriter& writer) = 0;
  // The checkpoint is committed and the process is not to run on: ends every tree.
  virtual void end_trees() = 0;
  // Note [CRIU run by someone else] (checkpoint.h): the runtime's CRIU dumps now that the device
  // memory is committed; whether its tasks run on afterwards (else it ended them).
  virtual Result<bool> dump_after_commit(const std::string& checkpoint_id) = 0;
};

// Imports parked regions into gcrd (how it reads them, and holds them until stored).
class DeviceHolder {
 public:
  virtual ~DeviceHolder() = default;
  virtual Result<std::unique_ptr<HeldMemory>> import(int fd, std::uint64_t size) = 0;
};

}  // namespace gcr::gcrd
