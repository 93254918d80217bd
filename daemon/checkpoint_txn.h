// gcr's checkpoint of a job (DESIGN.md §4) as a transaction (Note [Transactions] in
// transaction.h): phases that each leave their undo, so that a failure or timeout anywhere ends
// with every process running with its memory and nothing committed.
//
// Note [Checkpoint phases]
// Phase      what it does                                        its undo, should a later fail
// ---------  --------------------------------------------------
// ------------------------------------ prepare    begins the checkpoint in the store; the image
// dir;  the writer aborts (nothing is
//            CRIU started and ready (before the cut)              visible); CRIU ends, nothing
//            frozen
// cut        (members sharing memory) the consistent cut          - (the cut ends with the quiesce)
// quiesce    every member's gate closed, its streams drained      every member with an open session
//                                                                 resumed
// park       every member's regions handed to gcrd, a keeper      each parked member given its
//            per member                                           regions back (through its
//            session,
//                                                                 or connecting again once closed,
//                                                                 after undoing a driver lock a
//                                                                 dead CRIU left); the keepers let
//                                                                 go once all have it, else they
//                                                                 give it back
// hold       gcrd imports what it stores; pinned host memory      (the imports are dropped)
//            asked again with the GPU idle
// epoch      a new write-tracking epoch, the sessions closed      (park's undo reconnects)
// dump       CRIU freezes and dumps (each tree of a job); with    the trees left stopped go on
// (before
//            -R every tree runs again, parked                     park's undo gives their memory
//            back)
// select     which regions are stored, which come from the        -
//            parent (added to the manifest now)
// release    (-R) every member gets its memory back with its      park's undo is dropped: they have
// it
//            copy-on-write table, and runs: the stall ends
// drain      device memory, then CRIU's images, into the store    -
// commit     the manifest, atomically                             (a runtime's CRIU dumps after
// this:)
//                                                                 the checkpoint removed
// finish     lineage; a migration's hold; the stopped trees       -
//            ended (without -R); a runtime's CRIU dumps
//
// Invariants: a failure in any phase runs exactly the undos of what was done, in reverse; a
// process ends running with its memory (or, should gcrd die, its keeper gives it back); nothing
// is committed unless every phase up to commit succeeded. The modes are strategies, not branches:
// the Dumper (gcr's CRIU, a job's CRIUs, a runtime's CRIU, none) and a few plan flags.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "checkpoint_ports.h"
#include "drain.h"
#include "job.h"
#include "shared_table.h"
#include "transaction.h"

namespace gcr::gcrd {

// What inspecting the job found (checkpoint.cpp: inspect_checkpoint), the transaction's input.
struct CheckpointPlan {
  std::vector<pid_t> roots;              // pid first, then the job's other trees
  bool several_trees = false;            // --job with more than one tree
  bool job = false;                      // more than one member, or a member that is not the root
  bool external = false;                 // a runtime's CRIU, or a device-only round
  std::vector<std::string> owners;       // per member (job.h owner_name)
  std::vector<SharedAllocation> shared;  // memory the members share
  std::vector<bool> registered;          // per member: it registered host memory
  PinnedHostMemory pinned;               // as asked before the cut
  bool pinned_frozen = false;            // GCR_PINNED_FROZEN=1
  // Members linked by TCP (Note [TCP within a job]), or a part of a job across hosts (Note [A job
  // across hosts]): the cut runs for them too.
  bool cut_over_tcp = false;
  std::optional<store::CheckpointId> parent;
  std::map<std::string, std::string> meta;  // the manifest's META to begin with
};

struct CheckpointPorts {
  CheckpointStore& store;
  JobSessions& sessions;
  Keepers& keepers;
  Dumper& dumper;
  DeviceHolder& device;
  // Note [gcrd owns lineage]: the checkpoint the process's next one may build on.
  std::function<void(const std::string& id)> record_lineage;
  Progress progress;
  // Named points where tests pause gcrd (pause_point.h); none in unit tests.
  std::function<void(const char*)> pause = [](const char*) {};
  // The transaction's time limit (Note [Transactions]), on this clock.
  Transaction::Clock::duration limit = Transaction::Clock::duration::max();
  std::function<Transaction::Clock::time_point()> now = Transaction::Clock::now;
};

// Asks every member for the host memory it pinned (Note [Host memory tracked between
// checkpoints]); `frozen`: GCR_PINNED_FROZEN=1.
Result<PinnedHostMemory> ask_pinned(JobSessions& sessions, const std::vector<bool>& registered,
                                    bool frozen);

class CheckpointTransaction final : public Participant {
 public:
  CheckpointTransaction(const CheckpointRequest& request, CheckpointPlan plan,
                        CheckpointPorts ports);
  ~CheckpointTransaction() override;

  std::string name() const override;
  // Everything but the commit: the process runs again (-R) or waits stopped, its memory stored.
  Status prepare() override;
  // The manifest committed, and what follows (lineage, the end of a stopped process).
  Status commit() override;
  void abort() override { tx_.abort(); }
  // The two halves of commit(), for a part of a job across hosts (Note [A job across hosts] in
  // job_link.h): the manifest, as the request names it (a part: unnamed, and removed should the
  // job abort, undo "the job's part"), then the rest.
  Status commit_manifest_only();
  Status finish_commit();
  void set_meta(const std::string& key, const std::string& value);

  CheckpointReport& report() { return rep_; }
  // What the phase under way has made of the processes: "running", "quiesced", "parked",
  // "stopped" (CRIU left them so), or "draining" (running while the checkpoint is stored).
  std::string process_state() const;
  Transaction& transaction() { return tx_; }

 private:
  struct Member;  // one member's parked regions and their fate
  Status prepare_phases();
  Status commit_phases();
  Status after_failure(Status failed);
  Status begin();
  Status cut();
  Status quiesce();
  Status park();
  Status hold();
  Status epoch();
  Status dump();
  Status select();
  Status release();
  Status drain();
  Status drain_shared_memory(const std::function<void(std::uint64_t)>& stored);
  Status drain_members(const std::function<void(std::uint64_t)>& stored,
                       std::uint64_t& done_before);
  Status store_images();
  Status commit_manifest();
  Status finish();
  Status finish_external();
  Status finish_hold();
  bool give_all_back();
  bool must_store(std::size_t m, const control::RegionRecord& r) const;
  bool is_shared(std::size_t m, std::uint64_t address) const;
  void plan_shared_writes();

  const CheckpointRequest& req_;
  CheckpointPlan plan_;
  CheckpointPorts ports_;
  Transaction tx_;
  CheckpointReport rep_;
  std::unique_ptr<store::CheckpointWriter> writer_;
  std::optional<store::CommitInfo> committed_;
  bool end_after_commit_ = false;
  bool dumped_ = false;  // CRIU has dumped (the trees wait stopped without -R)
  std::vector<Member> members_;
  // A view of a shared allocation other than the one stored: (member, address) -> stored view.
  std::map<std::pair<std::size_t, std::uint64_t>, std::pair<std::size_t, std::uint64_t>> view_of_;
  std::map<std::pair<std::size_t, std::uint64_t>, std::size_t> parked_at_;  // -> index in parked
  std::set<std::pair<std::size_t, std::uint64_t>> shared_at_;  // every view, stored or not
  std::set<std::pair<std::size_t, std::uint64_t>> shared_to_write_;
  std::vector<std::uint64_t> touch_order_;
  // What the drain stores: per member, and the shared allocations behind every view.
  std::vector<std::vector<DrainRegion>> to_store_;
  std::vector<SharedDrain> shared_drains_;
  std::vector<std::vector<std::pair<std::size_t, std::uint64_t>>> shared_views_of_;
  std::vector<std::optional<CowTable>> tables_;
  std::string views_meta_;
  std::chrono::steady_clock::time_point t_begin_, t_cut_, t_store_;
};

}  // namespace gcr::gcrd
