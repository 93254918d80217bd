// Loading a checkpoint's device memory into gcrd's allocations on a thread of its own, so that a
// restore can run CRIU and resume the process meanwhile (Note [On-demand restore]).
//
// The loader moves each region in pieces of kPieceBytes (store -> host staging -> device) in the
// order it is given (the checkpoint's recorded first-touch order, else the manifest's), and marks
// the region's entry in the shared table done once all of it has arrived. Between pieces it looks
// for entries the process waits for (`wanted`) and switches to them: a process that touches a
// region not yet loaded waits for that region, not for the rest.
//
// Note [Loading behind the restore]
// On demand, the load overlaps CRIU's restore (gCROP's point), but on a machine of few cores the
// loader's two threads (and, on simgpu, the stream thread that does its copies) take the CPU that
// the restore's critical path needs: on 2 cores the process resumed 24-34 ms after the restore
// began with the loader held back, 40-61 ms with it competing. So until CRIU is done, and while
// nothing waits for a region, the loader's own two threads run at SCHED_IDLE (CPU time nothing
// else wants; so do the store's workers for its reads, gcr/store_workers.h, and simgpu's copies,
// Note [A copy engine takes no CPU]) and hand the device its copies in slices of kBehindSliceBytes,
// so that a copy the device has started never holds the CPU long. Not while another restore of the
// checkpoint shares its pieces (PieceCache): that one may be waiting for a piece this one reads.
// Where gcrd could not leave SCHED_IDLE again (no CAP_SYS_NICE), the loader does not yield.
//
// Below kCpusToLoadBehind usable CPUs even that costs the restore: SCHED_IDLE does not reach the
// kernel's io_uring workers that read the pieces, and a restore keeps CRIU, its lazy-pages daemon
// and gcrd's page server busy at once. On 2 cores (256 MiB, 8 restores each) the process resumed
// 30-39 ms after the restore began with the loader behind at SCHED_IDLE, 19-25 ms with it held,
// and was fully loaded 10-15 ms later. So there, until resumed(), the loader holds (loads only
// what something waits for, and only alone: see PieceCache above), with or without the right to
// yield.
//
// Note [Reading ahead]
// A piece is read from the store, checked, then copied; while it is checked and copied the disk
// would idle, and the kernel's own readahead does not see a piece's chunks, which io_uring reads
// in parallel, as one sequential stream. So the loader asks the store to read the next
// kPiecesAhead pieces of the given order into the page cache (CheckpointReader::prefetch, which
// returns at once); with the page cache warm it finds them there. With caches dropped, 1 GiB on
// demand was in after 749-853 ms instead of 1.13-2.57 s. Not while it holds for CRIU: CRIU's own
// start reads from the same disk then, and reading ahead there cost the process 10-15 ms of its
// time to resume for no gain in the full load.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "device.h"
#include "gcr/result.h"
#include "gcr/store.h"
#include "shared_table.h"

namespace gcr::gcrd {

class Loader {
 public:
  static constexpr std::uint64_t kPieceBytes = 16ull << 20;
  // Note [Loading behind the restore]
  static constexpr std::uint64_t kBehindSliceBytes = 2ull << 20;
  static constexpr unsigned kCpusToLoadBehind = 4;
  static constexpr int kPiecesAhead = 2;  // Note [Reading ahead]

  struct Item {
    store::ObjectEntry object;
    MappedAllocation* destination;  // owned by the caller, alive until wait() returns
  };

  // A table some of the items are waited for in (a job: one per process, Note [Job checkpoint]):
  // item i is its entry entry_of[i] (-1: not in this table).
  struct Watch {
    const CowTable* table = nullptr;
    std::vector<std::int64_t> entry_of;
  };

  // Starts loading at once. `table` (may be null: nothing waits) has one entry per item, in the
  // same order; it, the watches' tables and `reader` must outlive the loader. The reader is the
  // loader's alone. `behind_restore`: it yields the CPU, or holds, until resumed() (Note [Loading
  // behind the restore]).
  static Result<std::unique_ptr<Loader>> start(std::unique_ptr<store::CheckpointReader> reader,
                                               std::vector<Item> items, const CowTable* table,
                                               std::vector<Watch> watches = {},
                                               bool behind_restore = false);
  // CRIU is done (or the restore failed): from now on the loader is the critical path.
  void resumed() {
    std::lock_guard lock(held_mu_);
    behind_.store(false);
    holding_.store(false);
    held_cv_.notify_all();
  }
  ~Loader();  // stops (if still running) and joins

  // Waits until every region is loaded or loading failed; the first error. Idempotent.
  Status wait();
  // Waits at most `timeout` for the loader to end; whether it has (then wait() returns at once).
  bool wait_for(std::chrono::milliseconds timeout);
  // Asks the loader to stop after the piece it is on (a failed restore).
  void stop() {
    resumed();  // what it finishes, it finishes at once
    stop_.store(true);
  }
  // Non-blocking: the loader's error, if it has failed already.
  bool failed() const { return failed_.load(); }
  std::uint64_t loaded_bytes() const { return loaded_.load(); }
  std::uint64_t wanted_regions() const { return wanted_.load(); }
  std::uint64_t store_read_bytes() const { return read_.load(); }  // read from the store
  std::uint64_t shared_bytes() const {
    return shared_.load();
  }  // from a concurrent restore's reads

 private:
  Loader() = default;
  void run() noexcept;
  Status load_all();
  class Pass;  // one load_all(): what is loaded so far, what to take next

  std::unique_ptr<store::CheckpointReader> reader_;
  std::vector<Item> items_;
  std::vector<Watch> watches_;  // the table given to start() first
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> failed_{false};
  std::atomic<bool> behind_{false};      // until resumed()
  std::atomic<bool> background_{false};  // and nothing waited for, loading alone: they yield
  std::atomic<bool> holding_{false};     // until resumed(): too few CPUs to load behind
  std::mutex held_mu_;
  std::condition_variable held_cv_;
  std::atomic<std::uint64_t> loaded_{0};
  std::atomic<std::uint64_t> wanted_{0};
  std::atomic<std::uint64_t> read_{0};
  std::atomic<std::uint64_t> shared_{0};
  std::mutex mu_;
  Status result_ = ok();
  bool joined_ = false;
  std::mutex ended_mu_;
  std::condition_variable ended_cv_;
  bool ended_ = false;
};

}  // namespace gcr::gcrd
