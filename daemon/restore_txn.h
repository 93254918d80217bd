// gcr's restore of a checkpoint (DESIGN.md §5, restore.h) as a transaction (Note [Transactions] in
// transaction.h): phases that each leave their undo, so that a failure or timeout anywhere leaves
// no process running on memory it did not get, nothing reserved, and the checkpoint as it was.
//
// Note [Restore phases]
// Phase        what it does                                      its undo, should a later fail
// -----------  ------------------------------------------------  -------------------------------
// open         the checkpoint (resolved, or an arriving one by   (the reader closes)
//              its full id), its owner, the driver, where each
//              GPU goes (--device, --device-map)
// reserve      enough free memory on each GPU (staged memory     the load stops, then every
//              counts as held); every region allocated on its    allocation is freed, those taken
//              GPU or taken from what a migration staged (the    from the stage included (a
//              rest of the stage dropped); a job's plan; the     failure before the stage was
//              load started (on demand: behind CRIU, with load   dropped leaves the rest staged)
//              tables; --eager: all of it, now)
// materialize  CRIU's images in a private directory (checked     gcrd's server of host memory
//              for another host); gcrd's server of host memory   hangs up; the directory goes
//              started (lazy pages served from the store)
// criu         a keeper guards the restore from CRIU's start;    the restored processes (every
//              CRIU (or a container runtime's) restores the      tree of a job) are killed and
//              process parked (each tree of a job, each with a   waited for; a CRIU that failed
//              keeper of its own)                                lets its keeper go (no process)
// unpark       every member given its memory (its load table     (as criu)
//              first, on demand) and resumed; the keepers let
//              go (unless gcrd serves host memory)
// load         (on demand) the rest of device memory arrives;    (as criu)
//              then the sessions end
// host         (lazy) the rest of host memory arrives            (as criu)
// confirm      the keepers let go; lineage recorded              -
//
// Only the kill is an undo registered with the transaction: it runs at the failure, before
// anything else lets go. The rest is owned by the transaction's members and released when it is
// destroyed, in this order: the members' sessions, the keepers (the other trees', then the
// first's), gcrd's server of host memory (it hangs up before CRIU's lazy-pages daemon is killed
// and reaped), the image directory, the load (stopped and joined), the load tables, the
// allocations, the reader. A failure inside unpark drops the sessions it opened before the kill:
// the interposer ends a process whose loads are pending when its session ends (op_cow_end).
//
// Invariants: no process exists before every region has its memory (allocated, or staged); a
// restored process never runs on bytes it did not get (a failed load, or a page of host memory
// gcrd could not serve, kills it before anything releases its waiters: cow_end follows a complete
// load only); a keeper guards a restored process from CRIU's start until it holds its memory (and,
// when gcrd serves its host memory, until that is in); the checkpoint itself is never changed.
// Memory a migration staged is the restore's once taken: a failed restore frees it with the rest.
//
// The modes are the request's and the checkpoint's, read by the phases: on demand (default) or
// --eager; gcr's CRIU or a container runtime's (RestoreRequest::external_criu); one process, a job
// of members sharing memory, or a job of several trees; a --stop-copy image (no device memory);
// host memory lazy (served by gcrd, or by CRIU's daemon from the images) or not; a new PID
// namespace. tests/unit/transaction/restore_txn_test.cpp fails every port call of every mode in
// turn, and the deadline before every phase, and checks the undo order and the end state.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "job.h"
#include "restore.h"
#include "restore_ports.h"
#include "transaction.h"

namespace gcr::gcrd {

struct RestorePorts {
  RestoreStore& store;
  RestoreDevices& devices;
  CriuRestorer& criu;
  RestoreKeepers& keepers;
  RestoredProcesses& processes;
  // Note [gcrd owns lineage]: the restored process's next checkpoint may build on this one.
  std::function<void(pid_t pid, const std::string& id)> record_lineage;
  Progress progress;
  // Named points where tests pause gcrd (pause_point.h); none in unit tests.
  std::function<void(const char*)> pause = [](const char*) {};
  // Note [Host memory from the store] (host_pages.h); GCR_HOST_PAGES_FROM_STORE=0: false.
  bool host_pages_from_store = true;
  // The transaction's time limit (Note [Transactions]), on this clock.
  Transaction::Clock::duration limit = Transaction::Clock::duration::max();
  std::function<Transaction::Clock::time_point()> now = Transaction::Clock::now;
};

// Whether pid is a restored process whose host memory is still coming in (Note [Host memory
// restored lazily] in gcr/criu.h; wait_host_memory_restored in restore.h).
bool host_memory_filling(pid_t pid);

class RestoreTransaction {
 public:
  RestoreTransaction(const RestoreRequest& request, RestorePorts ports);
  RestoreTransaction(const RestoreTransaction&) = delete;
  RestoreTransaction& operator=(const RestoreTransaction&) = delete;
  ~RestoreTransaction();

  Result<RestoreReport> run();
  Transaction& transaction() { return tx_; }

 private:
  // A member of a restored job: the regions it maps, each one a stored object (an item) at an
  // address of the member's; a view of a shared allocation maps the object stored under another.
  struct MemberPlan {
    std::string owner;
    std::vector<control::RegionRecord> records;
    std::vector<std::size_t> items;  // parallel to records
    std::optional<CowTable> table;   // on-demand loading: what the member waits for
  };
  // Marks pids as filling (host_memory_filling) for its lifetime.
  class FillingScope {
   public:
    explicit FillingScope(std::vector<pid_t> pids);
    FillingScope(const FillingScope&) = delete;
    FillingScope& operator=(const FillingScope&) = delete;
    ~FillingScope();

   private:
    std::vector<pid_t> pids_;
  };

  Status open();
  Status check_devices();
  Status reserve();
  Status decode_job();
  Status job_pid_in_use();
  Status allocate();
  Status plan_job();
  Status start_loading();
  Status materialize();
  Status plan_host_memory();
  std::map<std::string, std::string> criu_env();
  Status restore_process();
  Status restore_external();
  Status restore_with_criu();
  Status choose_pid_namespace();
  Status run_criu(criu::RestoreOptions& ro);
  Status inherit_files(criu::RestoreOptions& ro, std::vector<UniqueFd>& relays,
                       std::vector<UniqueFd>& socket_ends);
  criu::RestoreOptions::Inherited inherited(int fd);
  void follow_spawned(pid_t spawned, const std::filesystem::path& ready);
  Status restore_other_trees(const criu::RestoreOptions& first);
  void end_other_trees();
  Status unpark();
  Status unpark_job();
  Status give_job_its_memory();
  pid_t live_member_pid(pid_t original);
  Status unpark_process();
  Status load();
  Status finish_loading(const std::string& who);
  Status host();
  void confirm();
  void end_restored();
  Error explain_killed(Error e);
  int target_of(std::uint32_t device) const;
  RestoreGuard* keeper() { return keeper_ ? keeper_->get() : nullptr; }
  void let_keeper_go() {
    if (RestoreGuard* k = keeper()) k->done();
  }
  bool lazy_running() const { return lazy_ && lazy_->running(); }

  const RestoreRequest& req_;
  RestorePorts ports_;
  Transaction tx_;
  RestoreReport rep_;
  Transaction::Clock::time_point t0_ = Transaction::Clock::now(), tl_, th_;
  store::CheckpointId id_;
  std::unique_ptr<store::CheckpointReader> reader_;
  bool job_ = false, several_trees_ = false, eager_ = false, external_ = false;
  std::string job_members_;
  std::vector<JobTree> job_trees_;
  std::vector<JobSocket> job_sockets_;
  std::vector<TcpConnection> job_tcp_;  // Note [TCP within a job] (job_tcp.h)
  TcpLock open_lock_;  // their lock once open (TcpLock::open), removed with the transaction
  std::vector<SharedView> shared_views_;
  std::vector<control::RegionRecord> records_;
  std::vector<std::unique_ptr<DeviceRegion>> allocations_;
  std::vector<store::ObjectEntry> objects_;
  std::set<std::uint64_t> staged_at_;  // regions on the GPU already (Note [Staged restore])
  std::vector<MemberPlan> plan_;
  std::optional<CowTable> table_;
  std::unique_ptr<DeviceLoad> loader_;
  std::unique_ptr<ImageDir> work_;
  std::unique_ptr<LazyHostMemory> lazy_;  // after work_: its images are read until it ends
  // Note [Host memory from the store] (host_pages.h). On the way out the server hangs up before
  // the daemon is reaped (killed first, should it still run).
  std::unique_ptr<HostPageServer> host_pages_;
  UniqueFd daemon_end_;  // the daemon's end of host_pages' socket, until CRIU has started it
  std::optional<FillingScope> filling_scope_;
  bool lazy_wanted_ = false, guarded_ = false, lazy_host_ = false;
  pid_t pid_ = 0;
  Result<std::unique_ptr<RestoreGuard>> keeper_ = std::unique_ptr<RestoreGuard>();
  std::vector<std::unique_ptr<RestoreGuard>> tree_keepers_;  // Note [A job of several trees]
  std::optional<Transaction::Clock::time_point> host_done_;  // the daemon seen to end well
  bool restored_ = false;                                    // a process exists: a failure kills it
  std::vector<std::unique_ptr<RestoredSession>> clients_;    // the members', from unpark to load
};

}  // namespace gcr::gcrd
