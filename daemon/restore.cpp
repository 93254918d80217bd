// The restore protocol (restore.h).
#include "restore.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "device.h"
#include "gcr/control.h"
#include "gcrd_protocol.h"
#include "host_pages.h"
#include "job.h"
#include "keeper.h"
#include "lineage.h"
#include "loader.h"
#include "pause_point.h"
#include "phase_clock.h"
#include "shared_table.h"
#include "staged.h"
#include "stream_relay.h"
#include "transaction.h"
#include "work_dir.h"

namespace gcr::gcrd {

namespace {
// Note [Host memory from the store] (host_pages.h); GCR_HOST_PAGES_FROM_STORE=0: CRIU's daemon
// reads the pages from materialized images instead.
bool host_pages_from_store() {
  const char* v = std::getenv("GCR_HOST_PAGES_FROM_STORE");
  return !(v && std::string_view(v) == "0");
}

// Waits (up to 5 s) until pid is gone or a zombie: a restore that failed returns only once the
// process it killed no longer runs (and its pid is free again soon after).
void wait_gone(pid_t pid) {
  for (int i = 0; i < 500; ++i) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string stat;
    if (!std::getline(in, stat)) return;
    auto close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z') return;
    usleep(10'000);
  }
}

// Puts the regions the process touched first after its cut (store::first_touch_order) at the
// front, the rest after them in manifest order. The three vectors stay parallel.
void order_by_first_touch(const store::Manifest& m, std::vector<store::ObjectEntry>& objects,
                          std::vector<control::RegionRecord>& records,
                          std::vector<MappedAllocation>& allocations) {
  std::vector<const store::ObjectEntry*> regions;
  for (const store::ObjectEntry& o : objects) regions.push_back(&o);
  std::vector<std::size_t> idx = store::first_touch_order(m, regions);
  std::vector<store::ObjectEntry> o2;
  std::vector<control::RegionRecord> r2;
  std::vector<MappedAllocation> a2;
  for (std::size_t i : idx) {
    o2.push_back(objects[i]);
    r2.push_back(records[i]);
    a2.push_back(std::move(allocations[i]));
  }
  objects = std::move(o2);
  records = std::move(r2);
  allocations = std::move(a2);
}
// The restored process of a job member: its pid as gcrd sees it.
pid_t live_member_pid(pid_t restored_root, pid_t original, bool new_namespace) {
  if (!new_namespace) return original;
  for (pid_t p : criu::tree_pids(restored_root))
    if (innermost_pid(p) == original) return p;
  return 0;
}

// A member of a restored job: the regions it maps, each one a stored object (an item) at an
// address of the member's; a view of a shared allocation maps the object stored under another.
struct MemberPlan {
  std::string owner;
  std::vector<control::RegionRecord> records;
  std::vector<std::size_t> items;  // parallel to records
  std::optional<CowTable> table;   // on-demand loading: what the member waits for
};

Result<std::vector<MemberPlan>> plan_job(const std::string& job_members,
                                         const std::vector<SharedView>& shared_views,
                                         const std::vector<store::ObjectEntry>& objects,
                                         const std::vector<MappedAllocation>& allocations) {
  std::vector<MemberPlan> plan;
  for (std::string& owner : decode_job_members(job_members)) {
    MemberPlan m;
    m.owner = std::move(owner);
    auto add = [&](std::uint64_t address, std::size_t k) {
      m.records.push_back(
          {address, objects[k].size, static_cast<std::uint32_t>(allocations[k].device()), 0});
      m.items.push_back(k);
    };
    for (std::size_t k = 0; k < objects.size(); ++k)
      if (objects[k].name == m.owner) add(objects[k].address, k);
    for (const SharedView& v : shared_views) {
      if (v.owner != m.owner) continue;
      std::size_t k = 0;
      while (k < objects.size() &&
             !(objects[k].name == v.stored_owner && objects[k].address == v.stored_address))
        ++k;
      if (k == objects.size())
        return Error{Errc::corrupt_image, "META shared_views names a region that is not stored (" +
                                              v.stored_owner + " " + hex_address(v.stored_address) +
                                              ")"};
      add(v.address, k);
    }
    plan.push_back(std::move(m));
  }
  return plan;
}

// Unparks every member of a restored job with its regions (a shared allocation exported once and
// duplicated for each view: every view's share key is the same file), its load table first when
// loading on demand, then lets them all run. The sessions stay open until the loads are done.
Result<std::vector<control::Client>> give_job_its_memory(
    pid_t restored_root, const RestoreReport& rep, const std::vector<MemberPlan>& plan,
    const std::vector<MappedAllocation>& allocations) {
  std::vector<std::optional<UniqueFd>> exported(allocations.size());
  auto fd_of = [&](std::size_t k) -> Result<UniqueFd> {
    if (!exported[k]) {
      GCR_TRY_ASSIGN(UniqueFd fd, allocations[k].export_fd());
      exported[k].emplace(std::move(fd));
    }
    int copy = ::fcntl(exported[k]->get(), F_DUPFD_CLOEXEC, 0);
    if (copy < 0) return errno_error("duplicating an exported region");
    return UniqueFd(copy);
  };
  std::vector<control::Client> clients;
  for (const MemberPlan& m : plan) {
    // A member that held no device memory was parked all the same: it gets an empty park back,
    // or its CUDA calls would wait at its closed gate for ever.
    pid_t original = owner_pid(m.owner, rep.original_pid);
    pid_t live = m.owner.empty() ? restored_root
                 : original      ? live_member_pid(restored_root, original, rep.new_pid_namespace)
                                 : 0;
    if (!live)
      return Error{Errc::corrupt_image, "the checkpoint's job member '" + m.owner +
                                            "' is not among the restored processes"};
    std::vector<control::ParkedRegion> regions;
    for (std::size_t j = 0; j < m.records.size(); ++j) {
      GCR_TRY_ASSIGN(UniqueFd fd, fd_of(m.items[j]));
      regions.push_back({m.records[j], std::move(fd)});
    }
    GCR_TRY_ASSIGN(control::Client client,
                   control::Client::connect(live, std::chrono::seconds(10)));
    if (m.table) GCR_TRY(client.cow_begin(m.table->fd(), m.table->count()));
    GCR_TRY(client.unpark(regions).context("giving restored process " + std::to_string(live) +
                                           " its memory"));
    clients.push_back(std::move(client));
  }
  for (control::Client& c : clients) GCR_TRY(c.resume());
  return clients;
}

// Note [Host memory restored lazily] (gcr/criu.h): the processes whose host memory is still coming
// in, with the daemon's userfaultfd registered on it. A checkpoint of one of them waits.
struct Filling {
  std::mutex mu;
  std::condition_variable changed;
  std::multiset<pid_t> pids;
};
Filling& filling() {
  static Filling f;
  return f;
}

// Marks pids as filling for its lifetime.
class FillingScope {
 public:
  explicit FillingScope(std::vector<pid_t> pids) : pids_(std::move(pids)) {
    std::lock_guard lock(filling().mu);
    filling().pids.insert(pids_.begin(), pids_.end());
  }
  FillingScope(const FillingScope&) = delete;
  FillingScope& operator=(const FillingScope&) = delete;
  ~FillingScope() {
    {
      std::lock_guard lock(filling().mu);
      for (pid_t p : pids_) filling().pids.erase(filling().pids.find(p));
    }
    filling().changed.notify_all();
  }

 private:
  std::vector<pid_t> pids_;
};

// Note [A job of several trees] (job.h): the trees after the first, each restored by a CRIU of its
// own with what the first was given (its files, the sockets between the trees), each guarded by a
// keeper of its own from its CRIU's start. A failure ends the trees restored so far.
Status restore_other_trees(const criu::Tools& tools, const criu::RestoreOptions& first,
                           const std::filesystem::path& images, const std::vector<JobTree>& trees,
                           bool guarded, RestoreReport& rep, std::vector<Keeper>& keepers) {
  auto end_restored = [&] {
    for (pid_t p : rep.tree_pids) {
      criu::kill_tree(p);
      wait_gone(p);
    }
    for (Keeper& k : keepers) k.done();
    keepers.clear();
    rep.tree_pids.clear();
  };
  for (std::size_t k = 1; k < trees.size(); ++k) {
    criu::RestoreOptions o;
    o.image_dir = images / tree_images_dir(trees[k].pid);
    o.env = first.env;
    o.shell_job = trees[k].shell_job;
    o.tcp_close = first.tcp_close;
    o.inherit = first.inherit;
    pid_t restored = 0;
    o.restored_pid = &restored;
    Result<Keeper> keeper =
        guarded ? Keeper::start_restore(o.image_dir / "restored.pid") : Result<Keeper>(Keeper());
    if (!keeper) {
      end_restored();
      return Error(keeper.error());
    }
    if (Status s = criu::restore(tools, o); !s) {
      keeper->done();
      end_restored();
      return std::move(s).context("restoring the tree of process " + std::to_string(trees[k].pid));
    }
    if (restored <= 1) {
      keeper->done();
      end_restored();
      return Error{Errc::internal, "CRIU restored the tree of process " +
                                       std::to_string(trees[k].pid) + " but named no pid for it"};
    }
    rep.tree_pids.push_back(restored);
    if (guarded)
      if (Status s = keeper->restored(restored); !s) {
        keeper->done();
        end_restored();
        return s;
      }
    keepers.push_back(std::move(keeper).value());
  }
  return ok();
}

}  // namespace

Status wait_host_memory_restored(const std::vector<pid_t>& pids, std::chrono::seconds timeout,
                                 const Progress& progress) {
  auto busy = [&] {
    for (pid_t p : pids)
      if (filling().pids.contains(p)) return true;
    return false;
  };
  std::unique_lock lock(filling().mu);
  if (!busy()) return ok();
  lock.unlock();  // progress() writes to the client, which may be slow to read
  progress("waiting for the restore of process " + std::to_string(pids.front()) +
           " to bring in the rest of its host memory");
  lock.lock();
  if (filling().changed.wait_for(lock, timeout, [&] { return !busy(); })) return ok();
  return Error{Errc::busy, "process " + std::to_string(pids.front()) +
                               " is still being restored (its host memory is coming in); try "
                               "again when `gcr restore` has returned"};
}

Result<std::map<int, int>> parse_device_map(const std::string& text) {
  std::map<int, int> out;
  std::set<int> targets;
  for (std::size_t at = 0; at <= text.size();) {
    std::size_t comma = text.find(',', at);
    if (comma == std::string::npos) comma = text.size();
    std::string pair = text.substr(at, comma - at);
    at = comma + 1;
    std::size_t eq = pair.find('=');
    auto number = [](const std::string& t) {
      if (t.empty() || t.size() > 3 || t.find_first_not_of("0123456789") != std::string::npos)
        return -1;
      return std::atoi(t.c_str());
    };
    int from = eq == std::string::npos ? -1 : number(pair.substr(0, eq));
    int to = eq == std::string::npos ? -1 : number(pair.substr(eq + 1));
    if (from < 0 || to < 0)
      return Error{Errc::invalid_argument,
                   "device map entry '" + pair + "' is not FROM=TO (GPU ordinals, e.g. 0=1,1=0)"};
    if (!out.emplace(from, to).second || !targets.insert(to).second)
      return Error{Errc::invalid_argument,
                   "device map '" + text + "' names GPU " +
                       std::to_string(out.contains(from) && out[from] != to ? from : to) +
                       " twice"};
  }
  return out;
}

namespace {

// Note [Restore phases]
// Phase        what it does                                       should a later phase fail
// -----------  -------------------------------------------------  --------------------------------
// open         the checkpoint, its owner, where each GPU goes      -
// reserve      every region allocated on its GPU (a restore that   the allocations are released and
//              cannot get its memory fails before any process      the loader stopped (RAII, when
//              exists), loading started (all of it: --eager)       the transaction ends)
// materialize  CRIU's images (for another host: who its process    the image directory goes
//              would run as, checked); gcrd's server of host memory
// criu         the process (every tree of a job) restored by CRIU  the restored processes are
// killed
//              with gcr's plugin, parked, guarded by a keeper      and waited for: none runs on
//                                                                  memory it did not get
// unpark       every member given its memory (its load table       (as criu)
//              first, on demand) and resumed
// load         (on demand) the rest of device memory arrives       (as criu)
// host         (lazy) the rest of host memory arrives              (as criu)
// confirm      the keepers let go; lineage recorded                -
// Invariants: no process exists before every region has its memory; a restored process never runs
// on bytes it did not get (a failed load kills it before its waiters are released); the
// checkpoint itself is never changed.
class RestoreTransaction {
 public:
  RestoreTransaction(store::Store& store, const criu::Tools& tools, const RestoreRequest& req,
                     const Progress& progress)
      : store_(store),
        tools_(tools),
        req_(req),
        progress_(progress),
        tx_("the restore of checkpoint " + req.name) {}
  // The undos need every member: they run before any is destroyed.
  ~RestoreTransaction() { tx_.abort(); }

  Result<RestoreReport> run();

 private:
  Status open();
  Status check_devices();
  Status reserve();
  Status decode_job();
  Status job_pid_in_use() const;
  Status allocate();
  Status start_loading();
  Status materialize();
  Status plan_host_memory();
  std::map<std::string, std::string> criu_env() const;
  Status restore_process();
  Status restore_external();
  Status restore_with_criu();
  Status choose_pid_namespace();
  Status run_criu(criu::RestoreOptions& ro);
  Status unpark();
  Status unpark_job();
  Status unpark_process();
  Status load();
  Status finish_loading(const std::string& who);
  Status host();
  void confirm();
  void end_restored();
  Error explain_killed(Error e);
  int target_of(std::uint32_t device) const;

  store::Store& store_;
  const criu::Tools& tools_;
  const RestoreRequest& req_;
  const Progress& progress_;
  Transaction tx_;
  RestoreReport rep_;
  Clock::time_point t0_ = Clock::now(), tl_, th_;
  store::CheckpointId id_;
  std::unique_ptr<store::CheckpointReader> reader_;
  Gpu* gpu_ = nullptr;
  bool job_ = false, several_trees_ = false, eager_ = false, external_ = false;
  std::string job_members_;
  std::vector<JobTree> job_trees_;
  std::vector<JobSocket> job_sockets_;
  std::vector<SharedView> shared_views_;
  std::vector<control::RegionRecord> records_;
  std::vector<MappedAllocation> allocations_;
  std::vector<store::ObjectEntry> objects_;
  std::set<std::uint64_t> staged_at_;  // regions on the GPU already (Note [Staged restore])
  std::vector<MemberPlan> plan_;
  std::optional<CowTable> table_;
  std::unique_ptr<Loader> loader_;
  std::optional<WorkDir> work_;
  criu::LazyPages lazy_;  // after work_: its images are read until the daemon ends
  // Note [Host memory from the store] (host_pages.h). On the way out the server hangs up before
  // the daemon is reaped (killed first, should it still run).
  std::unique_ptr<HostPages> host_pages_;
  UniqueFd daemon_end_;  // the daemon's end of host_pages' socket, until CRIU has started it
  std::optional<FillingScope> filling_scope_;
  bool lazy_wanted_ = false, guarded_ = false, lazy_host_ = false;
  pid_t pid_ = 0;
  Result<Keeper> keeper_ = Keeper();
  std::vector<Keeper> tree_keepers_;            // the other trees' (Note [A job of several trees])
  std::optional<Clock::time_point> host_done_;  // when the daemon was seen to have ended well
  bool restored_ = false;                       // a process exists: a failure kills it
  std::vector<control::Client> clients_;        // the members' sessions, from unpark to load
};

int RestoreTransaction::target_of(std::uint32_t device) const {
  if (req_.device) return *req_.device;
  auto it = req_.device_map.find(static_cast<int>(device));
  return it == req_.device_map.end() ? static_cast<int>(device) : it->second;
}

Result<RestoreReport> RestoreTransaction::run() {
  Status s = tx_.run("open", [&] { return open(); });
  if (s) s = tx_.run("reserve", [&] { return reserve(); });
  if (s) s = tx_.run("materialize", [&] { return materialize(); });
  if (s) s = tx_.run("criu", [&] { return restore_process(); });
  if (s) s = tx_.run("unpark", [&] { return unpark(); });
  if (s) s = tx_.run("load", [&] { return load(); });
  if (s && lazy_host_) s = tx_.run("host", [&] { return host(); });
  if (!s) return restored_ ? explain_killed(std::move(s).error()) : std::move(s).error();
  confirm();
  tx_.commit();
  return rep_;
}

// --- open ----------------------------------------------------------------------------------------

Status RestoreTransaction::open() {
  if (req_.arriving) {
    auto full = store::Id128::from_hex(req_.name);
    if (!full || req_.name.size() != 32)
      return Error{Errc::protocol, "an arriving checkpoint is named by its full id"};
    id_ = *full;
  } else {
    GCR_TRY_ASSIGN(id_, store_.resolve(req_.name));
  }
  GCR_TRY_ASSIGN(reader_, store_.open_checkpoint(id_, req_.arriving));
  const store::Manifest& m = reader_->manifest();
  rep_.id = id_.hex();
  rep_.kind = m.meta_or("kind", "gcr");
  const std::string owner = m.meta_or("owner_uid");
  if (req_.client_uid != 0 && owner != std::to_string(req_.client_uid))
    return Error{Errc::permission_denied,
                 "checkpoint " + rep_.id.substr(0, 12) + " belongs to " +
                     (owner.empty() ? std::string("no recorded owner (an older gcr wrote it)")
                                    : "uid " + owner) +
                     "; only root or its owner may restore it"};
  GCR_TRY_ASSIGN(gpu_, Gpu::get());
  return check_devices();
}

// Where each GPU of the checkpoint goes: every one named by --device-map, each on this machine.
Status RestoreTransaction::check_devices() {
  const store::Manifest& m = reader_->manifest();
  if (req_.device && (*req_.device < 0 || *req_.device >= gpu_->device_count()))
    return Error{Errc::invalid_argument, "--device " + std::to_string(*req_.device) +
                                             ": this machine has " +
                                             std::to_string(gpu_->device_count()) + " GPU(s)"};
  if (req_.device_map.empty()) return ok();
  std::set<int> used_devices;
  for (const auto& obj : m.objects)
    if (obj.kind == store::ObjectKind::device_region)
      used_devices.insert(static_cast<int>(obj.device));
  for (int d : used_devices)
    if (!req_.device_map.contains(d))
      return Error{Errc::invalid_argument, "--device-map does not say where GPU " +
                                               std::to_string(d) + " of checkpoint " +
                                               rep_.id.substr(0, 12) +
                                               " goes; name every GPU "
                                               "it used"};
  for (const auto& [from, to] : req_.device_map)
    if (to < 0 || to >= gpu_->device_count())
      return Error{Errc::invalid_argument, "--device-map " + std::to_string(from) + "=" +
                                               std::to_string(to) + ": this machine has " +
                                               std::to_string(gpu_->device_count()) + " GPU(s)"};
  return ok();
}

// --- reserve: device memory first: if it cannot be had, nothing has been started yet -------------

Status RestoreTransaction::reserve() {
  const store::Manifest& m = reader_->manifest();
  std::map<int, std::uint64_t> need;
  for (const auto& obj : m.objects)  // what is staged holds its memory already
    if (obj.kind == store::ObjectKind::device_region && !is_staged(m, obj, target_of(obj.device)))
      need[target_of(obj.device)] += obj.size;
  for (const auto& [dev, bytes] : need) {
    if (dev >= gpu_->device_count())
      return Error{Errc::invalid_argument,
                   "checkpoint " + rep_.id.substr(0, 12) + " used GPU " + std::to_string(dev) +
                       ", which this machine does not have; pick one with --device"};
    if (bytes > gpu_->free_bytes(dev))
      return Error{Errc::out_of_memory,
                   "checkpoint needs " + std::to_string(bytes >> 20) + " MiB on GPU " +
                       std::to_string(dev) + ", which has " +
                       std::to_string(gpu_->free_bytes(dev) >> 20) +
                       " MiB free; free memory there or pick another with --device"};
  }
  GCR_TRY(decode_job());
  GCR_TRY(job_pid_in_use());
  eager_ = req_.eager;
  GCR_TRY(allocate());
  return start_loading();
}

// Note [Job checkpoint] (job.h): a job's regions belong to its members by name, and a shared
// allocation is stored once and given to every member that mapped it. Note [A job of several
// trees] (job.h): the trees after the first, each restored by a CRIU of its own with its original
// pids, and the sockets between them connected again.
Status RestoreTransaction::decode_job() {
  const store::Manifest& m = reader_->manifest();
  job_members_ = m.meta_or("job_members");
  job_ = !job_members_.empty();
  GCR_TRY_ASSIGN(job_trees_, decode_job_trees(m.meta_or("job_trees")));
  GCR_TRY_ASSIGN(job_sockets_, decode_job_sockets(m.meta_or("job_sockets")));
  several_trees_ = job_trees_.size() > 1;
  if (several_trees_) {
    if (req_.external_criu)
      return Error{Errc::invalid_argument, "checkpoint " + rep_.id.substr(0, 12) +
                                               " is a job of several process trees: restore it "
                                               "with gcr restore"};
    if (req_.new_pid_namespace)
      return Error{Errc::unsupported,
                   "checkpoint " + rep_.id.substr(0, 12) +
                       " is a job of several process trees, which gcr restores with their "
                       "original pids only (a PID namespace holds one tree): leave out "
                       "--new-pid-namespace"};
  }
  GCR_TRY_ASSIGN(shared_views_, decode_shared_views(m.meta_or("shared_views")));
  return ok();
}

// The pids the trees' roots must get back; checked before anything is loaded, and again when
// CRIU is about to run.
Status RestoreTransaction::job_pid_in_use() const {
  for (const JobTree& t : job_trees_)
    if (several_trees_ && (kill(t.pid, 0) == 0 || errno == EPERM))
      return Error{Errc::busy, "pid " + std::to_string(t.pid) + " of checkpoint " +
                                   rep_.id.substr(0, 12) +
                                   "'s job is in use, and a job of several process trees is "
                                   "restored with its original pids: end what holds it"};
  return ok();
}

// Allocate everything first (cheap: no bytes move), then load: eagerly here, or on the loader's
// thread while CRIU runs (Note [On-demand restore] in gcr/cow_table.h).
Status RestoreTransaction::allocate() {
  const store::Manifest& m = reader_->manifest();
  tl_ = Clock::now();
  for (const auto& obj : m.objects) {
    if (obj.kind != store::ObjectKind::device_region) continue;
    int dev = target_of(obj.device);
    GCR_TRY(gpu_->use(dev));
    MappedAllocation a;
    if (auto staged = job_ ? std::nullopt : take_staged(m, obj, dev)) {
      a = std::move(*staged);
      staged_at_.insert(obj.address);
    } else {
      GCR_TRY_ASSIGN(a, MappedAllocation::create(obj.size, dev));
    }
    records_.push_back({obj.address, obj.size, static_cast<std::uint32_t>(dev), 0});
    rep_.region_bytes += obj.size;
    allocations_.push_back(std::move(a));
    objects_.push_back(obj);
  }
  if (!staged_at_.empty()) drop_staged();  // what the restore did not take
  order_by_first_touch(m, objects_, records_, allocations_);
  record_phase(rep_, "allocate", tl_);
  rep_.staged_bytes = 0;
  for (const auto& o : objects_)
    if (staged_at_.contains(o.address)) rep_.staged_bytes += o.size;
  if (job_) {
    GCR_TRY_ASSIGN(plan_, plan_job(job_members_, shared_views_, objects_, allocations_));
  }
  return ok();
}

// Loading on demand, each member waits in a table of its own; a shared allocation is loaded once
// for all its views. A failure from here on stops the loader (its destructor) before the
// allocations go.
Status RestoreTransaction::start_loading() {
  std::vector<Loader::Item> items;
  std::vector<control::RegionRecord> load_records;  // the table's: what is still to load
  for (std::size_t i = 0; i < objects_.size(); ++i) {
    if (staged_at_.contains(objects_[i].address)) continue;
    items.push_back({objects_[i], &allocations_[i]});
    load_records.push_back(records_[i]);
  }
  if (items.empty()) return ok();
  std::vector<Loader::Watch> watches;  // a job's: one table per member
  if (!eager_ && !job_) {
    GCR_TRY_ASSIGN(CowTable t, CowTable::create(load_records, cow::kLoad));
    table_.emplace(std::move(t));
  }
  if (!eager_ && job_) {
    for (MemberPlan& mp : plan_) {
      if (mp.records.empty()) continue;
      GCR_TRY_ASSIGN(CowTable t, CowTable::create(mp.records, cow::kLoad));
      mp.table.emplace(std::move(t));
    }
    for (const MemberPlan& mp : plan_) {
      if (!mp.table) continue;
      Loader::Watch w{&*mp.table, std::vector<std::int64_t>(objects_.size(), -1)};
      for (std::size_t j = 0; j < mp.items.size(); ++j)
        w.entry_of[mp.items[j]] = static_cast<std::int64_t>(j);
      watches.push_back(std::move(w));
    }
  }
  GCR_TRY_ASSIGN(auto own_reader, store_.open_checkpoint(id_, req_.arriving));
  // Note [Loading behind the restore] (loader.h): on demand, CRIU's restore goes first.
  GCR_TRY_ASSIGN(loader_, Loader::start(std::move(own_reader), std::move(items),
                                        table_ ? &*table_ : nullptr, std::move(watches), !eager_));
  progress_(std::string(eager_ ? "loading " : "loading on demand ") +
            std::to_string((rep_.region_bytes - rep_.staged_bytes) >> 20) +
            " MiB of device memory" +
            (rep_.staged_bytes ? " (" + std::to_string(rep_.staged_bytes >> 20) + " MiB staged)"
                               : std::string()));
  if (eager_) {
    GCR_TRY(loader_->wait());
    record_phase(rep_, "load", tl_);
    record_phase(rep_, "full", t0_);
  }
  return ok();
}

// --- materialize: CRIU's images, and gcrd's server of host memory --------------------------------

Status RestoreTransaction::materialize() {
  const store::Manifest& m = reader_->manifest();
  external_ = static_cast<bool>(req_.external_criu);
  if (!external_ && m.meta_or("criu_images") == "external")
    return Error{Errc::unsupported,
                 "checkpoint " + rep_.id.substr(0, 12) +
                     " holds the device memory of a container checkpoint; its CRIU images are in "
                     "the runtime's checkpoint (runc --image-path, podman's export): restore it "
                     "there, with gcr's CRIU plugin"};
  if (external_ && m.meta_or("criu_images") != "external")
    return Error{Errc::invalid_argument,
                 "checkpoint " + rep_.id.substr(0, 12) +
                     " was made by gcr checkpoint with its own CRIU images: restore it with gcr "
                     "restore, not through a container runtime"};
  auto tm = Clock::now();
  // --eager: nothing arrives after the process runs, host memory included.
  lazy_wanted_ = !external_ && !eager_ && !several_trees_ && criu::lazy_pages_available(tools_);
  if (lazy_wanted_ && host_pages_from_store()) GCR_TRY(plan_host_memory());
  if (!external_) {
    GCR_TRY_ASSIGN(WorkDir w, WorkDir::create("restore"));
    work_.emplace(std::move(w));
    GCR_TRY(host_pages_ ? reader_->materialize_files(work_->path(), host_pages_->left_out())
                        : reader_->materialize_files(work_->path()));
    if (req_.check_images) GCR_TRY(req_.check_images(work_->path()));
  }
  record_phase(rep_, "materialize", tm);
  if (host_pages_) {
    GCR_TRY_ASSIGN(auto own_reader, store_.open_checkpoint(id_, req_.arriving));
    GCR_TRY_ASSIGN(daemon_end_, host_pages_->serve(std::move(own_reader)));
  }
  // Guarded from CRIU's start (Note [Parked memory outlives gcrd], keeper.h): a process with
  // device memory to get, or host memory gcrd serves.
  guarded_ = !records_.empty() || host_pages_;
  return ok();
}

Status RestoreTransaction::plan_host_memory() {
  if (auto planned = HostPages::plan(*reader_)) {
    host_pages_ = std::move(planned).value();
  } else {
    std::fprintf(stderr, "gcrd: checkpoint %s: its host memory comes from CRIU's images (%s)\n",
                 rep_.id.substr(0, 12).c_str(), planned.error().message.c_str());
  }
  return ok();
}

// The environment of CRIU's plugin: where each GPU of the checkpoint goes.
std::map<std::string, std::string> RestoreTransaction::criu_env() const {
  auto env = driver_env();
  if (!req_.device_map.empty()) {
    // The driver's restore needs a pair for every GPU the process used (device 0 when the image
    // holds none): those of the map.
    std::string pairs;
    for (const auto& [from, to] : req_.device_map)
      pairs += (pairs.empty() ? "" : ",") + std::to_string(from) + "=" + std::to_string(to);
    env["GCR_DEVICE_MAP"] = pairs;
  } else if (req_.device) {
    std::set<int> used;
    for (const auto& obj : reader_->manifest().objects)
      if (obj.kind == store::ObjectKind::device_region) used.insert(static_cast<int>(obj.device));
    if (used.empty()) used.insert(0);
    env["GCR_DEVICE_MAP"] = std::to_string(*used.begin()) + "=" + std::to_string(*req_.device);
  }
  return env;
}

// --- criu: the process restored, parked ----------------------------------------------------------

Status RestoreTransaction::restore_process() {
  if (req_.device && req_.device_map.empty()) {
    // The driver's restore needs a pair for every GPU the process used: those its regions were on
    // (device 0 when the image holds none, as a --stop-copy image does).
    std::set<int> used;
    for (const auto& obj : reader_->manifest().objects)
      if (obj.kind == store::ObjectKind::device_region) used.insert(static_cast<int>(obj.device));
    if (used.size() > 1)
      return Error{Errc::unsupported, "checkpoint " + rep_.id.substr(0, 12) + " used " +
                                          std::to_string(used.size()) +
                                          " GPUs; --device moves a single-GPU process: give each "
                                          "GPU its place with --device-map"};
  }
  if (loader_ && loader_->failed()) return loader_->wait().error();  // before any process exists
  GCR_TRY(external_ ? restore_external() : restore_with_criu());
  rep_.pid = pid_;
  if (loader_) loader_->resumed();  // Note [Loading behind the restore]: CRIU's part is done
  pause_point("restored");
  // With lazy host memory every restored task (not only those under gcr) may be missing pages.
  lazy_host_ = lazy_.running();
  // A page gcrd could not serve while CRIU restored (the daemon was told, and gave up): the
  // process has not run yet (it is parked) and must not.
  if (host_pages_)
    if (auto e = host_pages_->failure()) return *e;
  return ok();
}

// Note [CRIU run by someone else] (checkpoint.h): the runtime's CRIU restores the tasks.
Status RestoreTransaction::restore_external() {
  // Note [Parked memory outlives gcrd] (keeper.h): from the moment the tasks exist, a gcrd that
  // dies before they have their memory takes them with it.
  if (!records_.empty()) keeper_ = Keeper::start_restore(std::filesystem::path());
  if (!keeper_) return std::move(keeper_).error();
  progress_("the runtime's CRIU restores the process");
  auto tc = Clock::now();
  auto restored = req_.external_criu();
  if (!restored) {
    keeper_->done();  // no task it could name
    return std::move(restored).error();
  }
  pid_ = *restored;
  restored_ = true;
  tx_.on_undo("the restored processes", [this] { end_restored(); });
  record_phase(rep_, "criu", tc);
  if (!records_.empty())
    if (Status s = keeper_->restored(pid_); !s) keeper_ = std::move(s).error();
  // A runtime restores a container's tasks into its own pid namespace: members by their pids
  // there.
  rep_.new_pid_namespace = innermost_pid(pid_) != pid_;
  return ok();
}

// The restored process takes its old pid: while something holds it, restore into a PID namespace
// of its own.
Status RestoreTransaction::choose_pid_namespace() {
  rep_.original_pid =
      static_cast<pid_t>(std::atoll(reader_->manifest().meta_or("pid", "0").c_str()));
  rep_.new_pid_namespace = req_.new_pid_namespace;
  GCR_TRY(job_pid_in_use());  // Note [A job of several trees]: taken meanwhile?
  if (!rep_.new_pid_namespace && rep_.original_pid > 0 &&
      (kill(rep_.original_pid, 0) == 0 || errno == EPERM)) {
    rep_.new_pid_namespace = true;
    progress_("pid " + std::to_string(rep_.original_pid) +
              " is in use: restoring into a new PID namespace");
  }
  if (rep_.new_pid_namespace && geteuid() != 0)
    return Error{
        Errc::unsupported,
        (req_.new_pid_namespace ? std::string("--new-pid-namespace")
                                : "pid " + std::to_string(rep_.original_pid) + " is in use, so") +
            " the restore needs a PID namespace of its own, which only root's gcrd can "
            "make (unshare needs CAP_SYS_ADMIN): end what holds the pid, or restore as "
            "root"};
  return ok();
}

Status RestoreTransaction::restore_with_criu() {
  // One decision and CRIU run at a time, so that two restores of one image do not both find the
  // pid free.
  static std::mutex criu_mu;
  std::unique_lock criu_lock(criu_mu);
  GCR_TRY(choose_pid_namespace());
  // Note [Parked memory outlives gcrd] in keeper.h: should gcrd die before the process holds its
  // memory (or the table that makes it wait for it), the keeper ends it; from now, as CRIU may
  // finish restoring it after gcrd is gone.
  if (guarded_)
    keeper_ = Keeper::start_restore(
        rep_.new_pid_namespace ? std::filesystem::path() : work_->path() / "restored.pid",
        host_pages_ ? host_pages_->server_fd() : -1);
  if (!keeper_) return std::move(keeper_).error();
  progress_("restoring the process with CRIU");
  auto tc = Clock::now();
  criu::RestoreOptions ro;
  ro.image_dir = work_->path();
  ro.env = criu_env();
  ro.restored_pid = &pid_;
  ro.new_pid_namespace = rep_.new_pid_namespace;
  ro.shell_job = reader_->manifest().meta_or("shell_job") == "1";
  ro.tcp_close = reader_->manifest().meta_or("tcp_close") == "1";
  if (lazy_wanted_) ro.lazy_pages = &lazy_;
  if (host_pages_) ro.lazy_pages_socket = daemon_end_.get();
  ro.before_criu = [] { pause_point("lazy-pages"); };
  GCR_TRY(run_criu(ro));
  criu_lock.unlock();
  daemon_end_.reset();  // the daemon's now; its exit is the server's end
  record_phase(rep_, "criu", tc);
  th_ = tc;
  if (lazy_.running()) filling_scope_.emplace(criu::tree_pids(pid_));
  if (guarded_)
    if (Status s = keeper_->restored(pid_); !s) keeper_ = std::move(s).error();
  if (host_pages_) host_pages_->on_failure([pid = pid_] { criu::kill_tree(pid); });
  return ok();
}

// CRIU's restore of the first tree (then of the others), with the files the caller hands the
// process and the sockets between a job's trees. A failure leaves no process: the keeper lets go.
Status RestoreTransaction::run_criu(criu::RestoreOptions& ro) {
  std::vector<UniqueFd> relays;  // gcrd's ends of the relays, closed once CRIU has its own
  for (const auto& in : req_.inherit) {
    int fd = in.fd.get();
    // Note [Streams reconnected by rule]: CRIU reopens an inherited pipe through /proc, as root:
    // anything but an anonymous pipe gets a pipe of gcrd's that copies into it.
    if (in.key.rfind("pipe:[", 0) == 0 && !may_reopen_as_pipe(fd)) {
      auto w = relay_into(fd);
      if (!w) {
        keeper_->done();  // no process to guard
        return std::move(w).error();
      }
      fd = w->get();
      relays.push_back(std::move(w).value());
    }
    ro.inherit.push_back({in.key, fd});
  }
  // Note [A job of several trees] (job.h): gcrd's ends of the sockets between the trees, until
  // every CRIU has its own.
  std::vector<UniqueFd> socket_ends;
  for (const JobSocket& js : job_sockets_) {
    int sv[2];
    if (::socketpair(AF_UNIX, js.type | SOCK_CLOEXEC, 0, sv) != 0) {
      Error e = errno_error("connecting the job's trees again (socketpair)");
      keeper_->done();  // no process to guard
      return e;
    }
    socket_ends.emplace_back(sv[0]);
    socket_ends.emplace_back(sv[1]);
    ro.inherit.push_back({"socket:[" + std::to_string(js.ino) + "]", sv[0]});
    ro.inherit.push_back({"socket:[" + std::to_string(js.peer_ino) + "]", sv[1]});
  }
  // The keeper follows a restore into a new PID namespace (it has no pidfile) and one whose host
  // memory gcrd serves. A page gcrd cannot serve while CRIU restores: the tasks, CRIU's so far,
  // are ended with CRIU (they have not run the program yet) rather than let CRIU go on with what
  // the daemon, told, leaves as zeros.
  ro.on_spawned = [this, ready = work_->path() / "restored.ready"](pid_t spawned) {
    auto follow = [](Status s) {
      if (!s)
        std::fprintf(stderr, "gcrd: the restore's keeper cannot follow it: %s\n",
                     s.error().message.c_str());
    };
    if (rep_.new_pid_namespace && keeper_ && guarded_)
      follow(keeper_->restoring_in_namespace(spawned, ready));
    if (!host_pages_) return;
    if (keeper_) follow(keeper_->restoring_in(spawned));
    host_pages_->on_failure([spawned] { criu::kill_tree(spawned); });
  };
  if (Status restored = criu::restore(tools_, ro); !restored) {
    keeper_->done();  // no process to guard
    if (host_pages_)
      if (auto e = host_pages_->failure()) {
        Error err = *e;
        err.message += "; the restore was ended (the checkpoint itself is unchanged)";
        return err;
      }
    return std::move(restored).error();
  }
  if (pid_ <= 1) {
    keeper_->done();
    return Error{Errc::internal, "CRIU restored checkpoint " + rep_.id.substr(0, 12) +
                                     " but named no pid for it (see restore.log)"};
  }
  restored_ = true;
  tx_.on_undo("the restored processes", [this] { end_restored(); });
  if (several_trees_)
    GCR_TRY(
        restore_other_trees(tools_, ro, work_->path(), job_trees_, guarded_, rep_, tree_keepers_)
            .context("the checkpoint's other process trees"));
  return ok();
}

// --- unpark: the process gets its memory and runs ------------------------------------------------

Status RestoreTransaction::unpark() {
  // Note [Job checkpoint]: every member of a gcr checkpoint was parked, with device memory or not;
  // a process that held no device memory was parked all the same: its CUDA calls wait at its
  // closed gate until it is given its (empty) park back.
  if (!records_.empty() || rep_.kind == "gcr") return job_ ? unpark_job() : unpark_process();
  record_phase(rep_, "resume", t0_);
  record_phase(rep_, "full", t0_);
  return ok();
}

Status RestoreTransaction::unpark_job() {
  auto tu = Clock::now();
  if (!keeper_) return Error(keeper_.error());
  GCR_TRY_ASSIGN(clients_, give_job_its_memory(pid_, rep_, plan_, allocations_));
  if (!host_pages_) keeper_->done();  // else once the host memory is in
  for (Keeper& k : tree_keepers_) k.done();
  record_phase(rep_, "unpark", tu);
  record_phase(rep_, "resume", t0_);
  if (records_.empty()) record_phase(rep_, "full", t0_);
  return ok();
}

Status RestoreTransaction::unpark_process() {
  auto tu = Clock::now();
  std::vector<control::ParkedRegion> regions;
  for (std::size_t i = 0; i < records_.size(); ++i) {
    GCR_TRY_ASSIGN(UniqueFd fd, allocations_[i].export_fd());
    regions.push_back({records_[i], std::move(fd)});
  }
  if (!keeper_) return Error(keeper_.error());
  GCR_TRY_ASSIGN(control::Client client, control::Client::connect(pid_, std::chrono::seconds(10)));
  // The table first, while the process is parked: from its unpark on, no region it has not got
  // can be touched without waiting, and should this session end with loads pending, the
  // interposer ends the process (op_cow_end) instead of letting it run on.
  if (table_) GCR_TRY(client.cow_begin(table_->fd(), table_->count()));
  pause_point("load-table");
  GCR_TRY(client.unpark(regions).context("giving restored process " + std::to_string(pid_) +
                                         " its memory"));
  GCR_TRY(client.resume());
  if (!host_pages_) keeper_->done();  // else once the host memory is in
  record_phase(rep_, "unpark", tu);
  record_phase(rep_, "resume", t0_);
  if (records_.empty()) record_phase(rep_, "full", t0_);
  clients_.push_back(std::move(client));
  return ok();
}

// On demand: the process (every member of a job) runs while the loader goes on. A failed load's
// process is ended (the undo of criu) before anything releases its waiters (cow_end): it never
// runs on bytes it did not get.
Status RestoreTransaction::load() {
  const bool on_demand = job_ ? !eager_ && !records_.empty() : static_cast<bool>(table_);
  if (on_demand) {
    GCR_TRY(finish_loading((job_ ? "job " : "process ") + std::to_string(pid_)));
    for (control::Client& c : clients_) (void)c.cow_end();
  }
  for (control::Client& c : clients_) {
    Status closed = c.close();
    if (!job_) GCR_TRY(std::move(closed));
  }
  clients_.clear();
  return ok();
}

Status RestoreTransaction::finish_loading(const std::string& who) {
  loader_->resumed();
  progress_(who + " resumed; loading the rest of its memory");
  pause_point("loading");
  while (!loader_->wait_for(std::chrono::milliseconds(100))) {
    progress_(bytes_progress("loading", loader_->loaded_bytes(), rep_.region_bytes));
    // Note [Host memory restored lazily]: a daemon that died must not wait for the device load.
    if (auto host = lazy_.poll()) {
      if (!*host) return std::move(*host).error();
      if (!host_done_) host_done_ = Clock::now();
    }
  }
  GCR_TRY(loader_->wait());
  record_phase(rep_, "load", tl_);
  record_phase(rep_, "full", t0_);
  rep_.wanted_regions = loader_->wanted_regions();
  return ok();
}

// --- host: the rest of host memory (Note [Host memory restored lazily] in gcr/criu.h) ------------

Status RestoreTransaction::host() {
  if (!lazy_host_) return ok();
  // A daemon that failed left zeros where the rest of the process's memory should be; it must not
  // run on them.
  progress_("process " + std::to_string(pid_) + " runs; bringing in the rest of its host memory");
  GCR_TRY(lazy_.wait());
  if (host_pages_) {
    host_pages_->join();
    const HostPages::Stats& hs = host_pages_->stats();
    rep_.host_served_bytes = hs.bytes;
    std::fprintf(stderr,
                 "gcrd: restore %s: served %llu MiB of host memory in %llu requests (%lld ms "
                 "reading the store, %lld ms sending)\n",
                 rep_.id.substr(0, 12).c_str(),
                 static_cast<unsigned long long>(rep_.host_served_bytes >> 20),
                 static_cast<unsigned long long>(hs.requests),
                 static_cast<long long>(hs.read_ns / 1'000'000),
                 static_cast<long long>(hs.send_ns / 1'000'000));
  }
  auto host_ns = [&](Clock::time_point from) {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          host_done_.value_or(Clock::now()) - from)
                                          .count());
  };
  record_phase(rep_, "host", th_);
  rep_.times_ns["host"] = host_ns(th_);
  rep_.times_ns["full"] = std::max(rep_.times_ns["full"], host_ns(t0_));
  rep_.lazy_host = true;
  rep_.host_from_store = static_cast<bool>(host_pages_);
  return ok();
}

// --- confirm -------------------------------------------------------------------------------------

void RestoreTransaction::confirm() {
  filling_scope_.reset();
  if (keeper_) keeper_->done();
  for (Keeper& k : tree_keepers_) k.done();
  // Note [gcrd owns lineage]: the restored process's next checkpoint may build on this one.
  if (auto key = process_key(pid_)) lineage_record(*key, rep_.id);
  if (loader_) {
    rep_.store_read_bytes = loader_->store_read_bytes();
    rep_.shared_bytes = loader_->shared_bytes();
  }
  record_phase(rep_, "total", t0_);
}

// The undo of criu: from CRIU on, a failure must not leave a process running on memory it never
// got. With lazy host memory every restored task (not only those under gcr) may be missing pages.
void RestoreTransaction::end_restored() {
  if (job_ || lazy_host_ || lazy_.running())
    criu::kill_tree(pid_);
  else if (pid_ > 1)
    kill(pid_, SIGKILL);
  for (pid_t other : rep_.tree_pids) {
    criu::kill_tree(other);
    wait_gone(other);
  }
  wait_gone(pid_);
}

Error RestoreTransaction::explain_killed(Error e) {
  // A page gcrd could not serve is the cause of whatever failed after it (a process that died on
  // what the daemon, told, left as zeros).
  if (host_pages_)
    if (auto f = host_pages_->failure()) e = *f;
  e.message += "; killed it: restored process " + std::to_string(pid_) +
               " cannot run without its " + (lazy_host_ ? "memory" : "device memory") +
               " (the checkpoint itself is unchanged)";
  return e;
}

}  // namespace

Result<RestoreReport> restore_checkpoint(store::Store& store, const criu::Tools& tools,
                                         const RestoreRequest& req, const Progress& progress) {
  return RestoreTransaction(store, tools, req, progress).run();
}

}  // namespace gcr::gcrd
