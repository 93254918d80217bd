// Note [Restore phases] (restore_txn.h).
#include "restore_txn.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <vector>

#include "address_takeover.h"
#include "gcr/tcp_lock.h"
#include "gcr/tcp_orphans.h"
#include "gcrd_protocol.h"
#include "hex_address.h"
#include "job_link.h"
#include "phase_clock.h"

namespace gcr::gcrd {

namespace {

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

// Puts the regions the process touched first after its cut (store::first_touch_order) at the
// front, the rest after them in manifest order. The three vectors stay parallel.
void order_by_first_touch(const store::Manifest& m, std::vector<store::ObjectEntry>& objects,
                          std::vector<control::RegionRecord>& records,
                          std::vector<std::unique_ptr<DeviceRegion>>& allocations) {
  std::vector<const store::ObjectEntry*> regions;
  for (const store::ObjectEntry& o : objects) regions.push_back(&o);
  std::vector<std::size_t> idx = store::first_touch_order(m, regions);
  std::vector<store::ObjectEntry> o2;
  std::vector<control::RegionRecord> r2;
  std::vector<std::unique_ptr<DeviceRegion>> a2;
  for (std::size_t i : idx) {
    o2.push_back(objects[i]);
    r2.push_back(records[i]);
    a2.push_back(std::move(allocations[i]));
  }
  objects = std::move(o2);
  records = std::move(r2);
  allocations = std::move(a2);
}

}  // namespace

RestoreTransaction::FillingScope::FillingScope(std::vector<pid_t> pids) : pids_(std::move(pids)) {
  std::lock_guard lock(filling().mu);
  filling().pids.insert(pids_.begin(), pids_.end());
}

RestoreTransaction::FillingScope::~FillingScope() {
  {
    std::lock_guard lock(filling().mu);
    for (pid_t p : pids_) filling().pids.erase(filling().pids.find(p));
  }
  filling().changed.notify_all();
}

bool host_memory_filling(pid_t pid) {
  std::lock_guard lock(filling().mu);
  return filling().pids.contains(pid);
}

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

RestoreTransaction::RestoreTransaction(const RestoreRequest& request, RestorePorts ports)
    : req_(request),
      ports_(std::move(ports)),
      tx_("the restore of checkpoint " + request.name, ports_.limit, ports_.now) {}

// The undos need every member: they run before any is destroyed.
RestoreTransaction::~RestoreTransaction() {
  tx_.abort();
}

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
    GCR_TRY_ASSIGN(id_, ports_.store.resolve(req_.name));
  }
  GCR_TRY_ASSIGN(reader_, ports_.store.open(id_, req_.arriving));
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
  GCR_TRY(ports_.devices.open());
  return check_devices();
}

// Where each GPU of the checkpoint goes: every one named by --device-map, each on this machine.
Status RestoreTransaction::check_devices() {
  const store::Manifest& m = reader_->manifest();
  const int count = ports_.devices.count();
  if (req_.device && (*req_.device < 0 || *req_.device >= count))
    return Error{Errc::invalid_argument, "--device " + std::to_string(*req_.device) +
                                             ": this machine has " + std::to_string(count) +
                                             " GPU(s)"};
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
    if (to < 0 || to >= count)
      return Error{Errc::invalid_argument, "--device-map " + std::to_string(from) + "=" +
                                               std::to_string(to) + ": this machine has " +
                                               std::to_string(count) + " GPU(s)"};
  return ok();
}

// --- reserve: device memory first: if it cannot be had, nothing has been started yet -------------

Status RestoreTransaction::reserve() {
  const store::Manifest& m = reader_->manifest();
  std::map<int, std::uint64_t> need;
  for (const auto& obj : m.objects)  // what is staged holds its memory already
    if (obj.kind == store::ObjectKind::device_region &&
        !ports_.devices.is_staged(m, obj, target_of(obj.device)))
      need[target_of(obj.device)] += obj.size;
  for (const auto& [dev, bytes] : need) {
    if (dev >= ports_.devices.count())
      return Error{Errc::invalid_argument,
                   "checkpoint " + rep_.id.substr(0, 12) + " used GPU " + std::to_string(dev) +
                       ", which this machine does not have; pick one with --device"};
    if (bytes > ports_.devices.free_bytes(dev))
      return Error{Errc::out_of_memory,
                   "checkpoint needs " + std::to_string(bytes >> 20) + " MiB on GPU " +
                       std::to_string(dev) + ", which has " +
                       std::to_string(ports_.devices.free_bytes(dev) >> 20) +
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
  GCR_TRY_ASSIGN(job_tcp_, decode_job_tcp(m.meta_or("job_tcp")));
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
Status RestoreTransaction::job_pid_in_use() {
  for (const JobTree& t : job_trees_)
    if (several_trees_ && ports_.processes.pid_in_use(t.pid))
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
    GCR_TRY(ports_.devices.use(dev));
    std::unique_ptr<DeviceRegion> a;
    if (!job_) a = ports_.devices.take_staged(m, obj, dev);
    if (a) {
      staged_at_.insert(obj.address);
    } else {
      GCR_TRY_ASSIGN(a, ports_.devices.allocate(obj.size, dev));
    }
    records_.push_back({obj.address, obj.size, static_cast<std::uint32_t>(dev), 0});
    rep_.region_bytes += obj.size;
    allocations_.push_back(std::move(a));
    objects_.push_back(obj);
  }
  if (!staged_at_.empty()) ports_.devices.drop_staged();  // what the restore did not take
  order_by_first_touch(m, objects_, records_, allocations_);
  record_phase(rep_, "allocate", tl_);
  rep_.staged_bytes = 0;
  for (const auto& o : objects_)
    if (staged_at_.contains(o.address)) rep_.staged_bytes += o.size;
  if (job_) GCR_TRY(plan_job());
  return ok();
}

Status RestoreTransaction::plan_job() {
  std::vector<MemberPlan> plan;
  for (std::string& owner : decode_job_members(job_members_)) {
    MemberPlan m;
    m.owner = std::move(owner);
    auto add = [&](std::uint64_t address, std::size_t k) {
      m.records.push_back(
          {address, objects_[k].size, static_cast<std::uint32_t>(allocations_[k]->device()), 0});
      m.items.push_back(k);
    };
    for (std::size_t k = 0; k < objects_.size(); ++k)
      if (objects_[k].name == m.owner) add(objects_[k].address, k);
    for (const SharedView& v : shared_views_) {
      if (v.owner != m.owner) continue;
      std::size_t k = 0;
      while (k < objects_.size() &&
             !(objects_[k].name == v.stored_owner && objects_[k].address == v.stored_address))
        ++k;
      if (k == objects_.size())
        return Error{Errc::corrupt_image, "META shared_views names a region that is not stored (" +
                                              v.stored_owner + " " + hex_address(v.stored_address) +
                                              ")"};
      add(v.address, k);
    }
    plan.push_back(std::move(m));
  }
  plan_ = std::move(plan);
  return ok();
}

// Loading on demand, each member waits in a table of its own; a shared allocation is loaded once
// for all its views. A failure from here on stops the loader (its destructor) before the
// allocations go.
Status RestoreTransaction::start_loading() {
  std::vector<RestoreDevices::LoadItem> items;
  std::vector<control::RegionRecord> load_records;  // the table's: what is still to load
  for (std::size_t i = 0; i < objects_.size(); ++i) {
    if (staged_at_.contains(objects_[i].address)) continue;
    items.push_back({objects_[i], allocations_[i].get()});
    load_records.push_back(records_[i]);
  }
  if (items.empty()) return ok();
  std::vector<RestoreDevices::LoadWatch> watches;  // a job's: one table per member
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
      RestoreDevices::LoadWatch w{&*mp.table, std::vector<std::int64_t>(objects_.size(), -1)};
      for (std::size_t j = 0; j < mp.items.size(); ++j)
        w.entry_of[mp.items[j]] = static_cast<std::int64_t>(j);
      watches.push_back(std::move(w));
    }
  }
  GCR_TRY_ASSIGN(auto own_reader, ports_.store.open(id_, req_.arriving));
  // Note [Loading behind the restore] (loader.h): on demand, CRIU's restore goes first.
  GCR_TRY_ASSIGN(loader_,
                 ports_.devices.load(std::move(own_reader), std::move(items),
                                     table_ ? &*table_ : nullptr, std::move(watches), !eager_));
  ports_.progress(
      std::string(eager_ ? "loading " : "loading on demand ") +
      std::to_string((rep_.region_bytes - rep_.staged_bytes) >> 20) + " MiB of device memory" +
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
  lazy_wanted_ = !external_ && !eager_ && !several_trees_ && ports_.criu.lazy_pages_available();
  if (lazy_wanted_ && ports_.host_pages_from_store) GCR_TRY(plan_host_memory());
  if (!external_) {
    GCR_TRY_ASSIGN(work_, ports_.criu.image_dir());
    GCR_TRY(host_pages_ ? reader_->materialize_files(work_->path(), host_pages_->left_out())
                        : reader_->materialize_files(work_->path()));
    if (req_.check_images) GCR_TRY(req_.check_images(work_->path()));
  }
  record_phase(rep_, "materialize", tm);
  if (host_pages_) {
    GCR_TRY_ASSIGN(auto own_reader, ports_.store.open(id_, req_.arriving));
    GCR_TRY_ASSIGN(daemon_end_, host_pages_->serve(std::move(own_reader)));
  }
  // Guarded from CRIU's start (Note [Parked memory outlives gcrd], keeper.h): a process with
  // device memory to get, or host memory gcrd serves.
  guarded_ = !records_.empty() || host_pages_;
  return ok();
}

Status RestoreTransaction::plan_host_memory() {
  if (auto planned = ports_.criu.plan_host_pages(*reader_)) {
    host_pages_ = std::move(planned).value();
  } else {
    std::fprintf(stderr, "gcrd: checkpoint %s: its host memory comes from CRIU's images (%s)\n",
                 rep_.id.substr(0, 12).c_str(), planned.error().message.c_str());
  }
  return ok();
}

// The environment of CRIU's plugin: where each GPU of the checkpoint goes.
std::map<std::string, std::string> RestoreTransaction::criu_env() {
  auto env = ports_.criu.driver_env();
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
  ports_.pause("restored");
  // With lazy host memory every restored task (not only those under gcr) may be missing pages.
  lazy_host_ = lazy_running();
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
  if (!records_.empty()) keeper_ = ports_.keepers.start(std::filesystem::path(), -1);
  if (!keeper_) return std::move(keeper_).error();
  ports_.progress("the runtime's CRIU restores the process");
  auto tc = Clock::now();
  auto restored = req_.external_criu();
  if (!restored) {
    let_keeper_go();  // no task it could name
    return std::move(restored).error();
  }
  pid_ = *restored;
  restored_ = true;
  tx_.on_undo("the restored processes", [this] { end_restored(); });
  record_phase(rep_, "criu", tc);
  if (!records_.empty())
    if (Status s = keeper()->restored(pid_); !s) keeper_ = std::move(s).error();
  // A runtime restores a container's tasks into its own pid namespace: members by their pids
  // there.
  rep_.new_pid_namespace = ports_.processes.innermost_pid(pid_) != pid_;
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
      ports_.processes.pid_in_use(rep_.original_pid)) {
    rep_.new_pid_namespace = true;
    ports_.progress("pid " + std::to_string(rep_.original_pid) +
                    " is in use: restoring into a new PID namespace");
  }
  if (rep_.new_pid_namespace && !ports_.processes.privileged())
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
    keeper_ = ports_.keepers.start(
        rep_.new_pid_namespace ? std::filesystem::path() : work_->path() / "restored.pid",
        host_pages_ ? host_pages_->server_fd() : -1);
  if (!keeper_) return std::move(keeper_).error();
  ports_.progress("restoring the process with CRIU");
  auto tc = Clock::now();
  criu::RestoreOptions ro;
  ro.image_dir = work_->path();
  ro.env = criu_env();
  ro.restored_pid = &pid_;
  ro.new_pid_namespace = rep_.new_pid_namespace;
  ro.netns = req_.netns;
  ro.hostname = req_.hostname;
  ro.shell_job = reader_->manifest().meta_or("shell_job") == "1";
  ro.tcp_close = reader_->manifest().meta_or("tcp_close") == "1";
  ro.tcp_established = !job_tcp_.empty();
  if (host_pages_) ro.lazy_pages_socket = daemon_end_.get();
  ro.before_criu = [this] { ports_.pause("lazy-pages"); };
  GCR_TRY(run_criu(ro));
  criu_lock.unlock();
  daemon_end_.reset();  // the daemon's now; its exit is the server's end
  record_phase(rep_, "criu", tc);
  th_ = tc;
  if (lazy_running()) filling_scope_.emplace(ports_.processes.tree_pids(pid_));
  if (guarded_)
    if (Status s = keeper()->restored(pid_); !s) keeper_ = std::move(s).error();
  if (host_pages_)
    host_pages_->on_failure(
        [&processes = ports_.processes, pid = pid_] { processes.kill_tree(pid); });
  return ok();
}

// What CRIU is handed for a file the caller hands the process. Note [Streams reconnected by rule]:
// CRIU reopens an inherited pipe through /proc, as root: anything but an anonymous pipe gets a
// pipe of gcrd's that copies into it (`relays`: gcrd's ends, closed once CRIU has its own).
// Note [A job of several trees] (job.h): gcrd's ends of the sockets between the trees, until
// every CRIU has its own.
Status RestoreTransaction::inherit_files(criu::RestoreOptions& ro, std::vector<UniqueFd>& relays,
                                         std::vector<UniqueFd>& socket_ends) {
  for (const auto& in : req_.inherit) {
    int fd = in.fd.get();
    if (in.key.rfind("pipe:[", 0) == 0 && !ports_.criu.may_reopen_as_pipe(fd)) {
      GCR_TRY_ASSIGN(UniqueFd w, ports_.criu.relay_into(fd));
      fd = w.get();
      relays.push_back(std::move(w));
    }
    ro.inherit.push_back({in.key, fd});
  }
  for (const JobSocket& js : job_sockets_) {
    int sv[2];
    if (::socketpair(AF_UNIX, js.type | SOCK_CLOEXEC, 0, sv) != 0)
      return errno_error("connecting the job's trees again (socketpair)");
    socket_ends.emplace_back(sv[0]);
    socket_ends.emplace_back(sv[1]);
    ro.inherit.push_back({"socket:[" + std::to_string(js.ino) + "]", sv[0]});
    ro.inherit.push_back({"socket:[" + std::to_string(js.peer_ino) + "]", sv[1]});
  }
  return ok();
}

// The keeper follows a restore into a new PID namespace (it has no pidfile) and one whose host
// memory gcrd serves. A page gcrd cannot serve while CRIU restores: the tasks, CRIU's so far,
// are ended with CRIU (they have not run the program yet) rather than let CRIU go on with what
// the daemon, told, leaves as zeros.
void RestoreTransaction::follow_spawned(pid_t spawned, const std::filesystem::path& ready) {
  auto follow = [](Status s) {
    if (!s)
      std::fprintf(stderr, "gcrd: the restore's keeper cannot follow it: %s\n",
                   s.error().message.c_str());
  };
  if (rep_.new_pid_namespace && keeper() && guarded_)
    follow(keeper()->restoring_in_namespace(spawned, ready));
  if (!host_pages_) return;
  if (keeper()) follow(keeper()->restoring_in(spawned));
  host_pages_->on_failure(
      [&processes = ports_.processes, spawned] { processes.kill_tree(spawned); });
}

// CRIU's restore of the first tree (then of the others), with the files the caller hands the
// process and the sockets between a job's trees. A failure leaves no process: the keeper lets go.
Status RestoreTransaction::run_criu(criu::RestoreOptions& ro) {
  std::vector<UniqueFd> relays;       // gcrd's ends of the relays, closed once CRIU has its own
  std::vector<UniqueFd> socket_ends;  // gcrd's ends of the sockets between the trees
  if (Status s = inherit_files(ro, relays, socket_ends); !s) {
    let_keeper_go();  // no process to guard
    return s;
  }
  ro.on_spawned = [this, ready = work_->path() / "restored.ready"](pid_t spawned) {
    follow_spawned(spawned, ready);
  };
  // Note [TCP within a job] (job_tcp.h): no end may send before its peer is back.
  TcpLock tcp_lock;
  if (!job_tcp_.empty()) {
    auto lock = TcpLock::engage(0, job_tcp_);
    if (!lock) {
      let_keeper_go();
      return std::move(lock).error();
    }
    tcp_lock = std::move(lock).value();
    // Note [Connections a killed run left behind] (gcr/tcp_orphans.h).
    if (auto ended = criu::end_orphaned_connections(job_tcp_); !ended)
      ports_.progress("lingering connections of an earlier run not looked for: " +
                      ended.error().message);
    else if (*ended)
      ports_.progress("ended " + std::to_string(*ended) +
                      " connections an earlier run of the job left behind");
  }
  // Under the lock: a peer's packet that reached the address before CRIU has restored its socket
  // would be answered with a reset.
  if (req_.take_addresses && !job_tcp_.empty()) {  // Note [Addresses that move with a rank]
    std::vector<std::uint32_t> ips;
    for (const TcpConnection& c : job_tcp_) ips.push_back(c.local.ip);
    auto taken = take_addresses(ips);
    if (!taken) {
      let_keeper_go();
      return std::move(taken).error();
    }
    std::vector<std::uint32_t> added;
    for (const TakenAddress& t : *taken)
      if (t.added) {
        added.push_back(t.ip);
        ports_.progress("took address " + address_text(t.ip) + " on " + t.device +
                        " for the restored rank");
      }
    // Given up again should the restore fail: the rank may run on where it was (Note [A rank
    // moved while its job runs]).
    if (!added.empty())
      tx_.on_undo("the addresses taken", [added] { (void)release_addresses(added); });
  }
  if (Status restored = ports_.criu.restore(ro, lazy_wanted_ ? &lazy_ : nullptr); !restored) {
    let_keeper_go();  // no process to guard
    if (host_pages_)
      if (auto e = host_pages_->failure()) {
        Error err = *e;
        err.message += "; the restore was ended (the checkpoint itself is unchanged)";
        return err;
      }
    return std::move(restored).error();
  }
  if (pid_ <= 1) {
    let_keeper_go();
    return Error{Errc::internal, "CRIU restored checkpoint " + rep_.id.substr(0, 12) +
                                     " but named no pid for it (see restore.log)"};
  }
  restored_ = true;
  tx_.on_undo("the restored processes", [this] { end_restored(); });
  if (several_trees_)
    GCR_TRY(restore_other_trees(ro).context("the checkpoint's other process trees"));
  if (req_.link) GCR_TRY(req_.link->restored().context("the job's other hosts"));
  // Open now, removed when the restore is over (TcpLock::open: the removal is slow).
  tcp_lock.open();
  open_lock_ = std::move(tcp_lock);
  return ok();
}

// Ends the other trees restored so far (restore_other_trees), and lets their keepers go.
void RestoreTransaction::end_other_trees() {
  for (pid_t p : rep_.tree_pids) {
    ports_.processes.kill_tree(p);
    ports_.processes.wait_gone(p);
  }
  for (auto& k : tree_keepers_)
    if (k) k->done();
  tree_keepers_.clear();
  rep_.tree_pids.clear();
}

// Note [A job of several trees] (job.h): the trees after the first, each restored by a CRIU of its
// own with what the first was given (its files, the sockets between the trees), each guarded by a
// keeper of its own from its CRIU's start. A failure ends the trees restored so far.
Status RestoreTransaction::restore_other_trees(const criu::RestoreOptions& first) {
  for (std::size_t k = 1; k < job_trees_.size(); ++k) {
    criu::RestoreOptions o;
    o.image_dir = work_->path() / tree_images_dir(job_trees_[k].pid);
    o.env = first.env;
    o.shell_job = job_trees_[k].shell_job;
    o.tcp_close = first.tcp_close;
    o.tcp_established = first.tcp_established;
    o.inherit = first.inherit;
    pid_t restored = 0;
    o.restored_pid = &restored;
    Result<std::unique_ptr<RestoreGuard>> keeper =
        guarded_ ? ports_.keepers.start(o.image_dir / "restored.pid", -1)
                 : Result<std::unique_ptr<RestoreGuard>>(std::unique_ptr<RestoreGuard>());
    if (!keeper) {
      end_other_trees();
      return Error(keeper.error());
    }
    auto let_go = [&] {
      if (*keeper) (*keeper)->done();
      end_other_trees();
    };
    if (Status s = ports_.criu.restore(o, nullptr); !s) {
      let_go();
      return std::move(s).context("restoring the tree of process " +
                                  std::to_string(job_trees_[k].pid));
    }
    if (restored <= 1) {
      let_go();
      return Error{Errc::internal, "CRIU restored the tree of process " +
                                       std::to_string(job_trees_[k].pid) +
                                       " but named no pid for it"};
    }
    rep_.tree_pids.push_back(restored);
    if (guarded_)
      if (Status s = (*keeper)->restored(restored); !s) {
        let_go();
        return s;
      }
    tree_keepers_.push_back(std::move(keeper).value());
  }
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
  GCR_TRY(give_job_its_memory());
  if (!host_pages_) let_keeper_go();  // else once the host memory is in
  for (auto& k : tree_keepers_)
    if (k) k->done();
  record_phase(rep_, "unpark", tu);
  record_phase(rep_, "resume", t0_);
  if (records_.empty()) record_phase(rep_, "full", t0_);
  return ok();
}

// The restored process of a job member: its pid as gcrd sees it.
pid_t RestoreTransaction::live_member_pid(pid_t original) {
  if (!rep_.new_pid_namespace) return original;
  for (pid_t p : ports_.processes.tree_pids(pid_))
    if (ports_.processes.innermost_pid(p) == original) return p;
  return 0;
}

// Unparks every member of a restored job with its regions (a shared allocation exported once and
// duplicated for each view: every view's share key is the same file), its load table first when
// loading on demand, then lets them all run. The sessions stay open until the loads are done; a
// failure drops those opened so far before the undo of criu ends the job.
Status RestoreTransaction::give_job_its_memory() {
  std::vector<std::optional<UniqueFd>> exported(allocations_.size());
  auto fd_of = [&](std::size_t k) -> Result<UniqueFd> {
    if (!exported[k]) {
      GCR_TRY_ASSIGN(UniqueFd fd, allocations_[k]->export_fd());
      exported[k].emplace(std::move(fd));
    }
    int copy = ::fcntl(exported[k]->get(), F_DUPFD_CLOEXEC, 0);
    if (copy < 0) return errno_error("duplicating an exported region");
    return UniqueFd(copy);
  };
  std::vector<std::unique_ptr<RestoredSession>> clients;
  for (const MemberPlan& m : plan_) {
    // A member that held no device memory was parked all the same: it gets an empty park back,
    // or its CUDA calls would wait at its closed gate for ever.
    pid_t original = owner_pid(m.owner, rep_.original_pid);
    pid_t live = m.owner.empty() ? pid_ : original ? live_member_pid(original) : 0;
    if (!live)
      return Error{Errc::corrupt_image, "the checkpoint's job member '" + m.owner +
                                            "' is not among the restored processes"};
    std::vector<control::ParkedRegion> regions;
    for (std::size_t j = 0; j < m.records.size(); ++j) {
      GCR_TRY_ASSIGN(UniqueFd fd, fd_of(m.items[j]));
      regions.push_back({m.records[j], std::move(fd)});
    }
    GCR_TRY_ASSIGN(std::unique_ptr<RestoredSession> client, ports_.processes.connect(live));
    if (m.table) GCR_TRY(client->cow_begin(m.table->fd(), m.table->count()));
    GCR_TRY(client->unpark(regions).context("giving restored process " + std::to_string(live) +
                                            " its memory"));
    clients.push_back(std::move(client));
  }
  for (auto& c : clients) GCR_TRY(c->resume());
  clients_ = std::move(clients);
  return ok();
}

Status RestoreTransaction::unpark_process() {
  auto tu = Clock::now();
  std::vector<control::ParkedRegion> regions;
  for (std::size_t i = 0; i < records_.size(); ++i) {
    GCR_TRY_ASSIGN(UniqueFd fd, allocations_[i]->export_fd());
    regions.push_back({records_[i], std::move(fd)});
  }
  if (!keeper_) return Error(keeper_.error());
  GCR_TRY_ASSIGN(std::unique_ptr<RestoredSession> client, ports_.processes.connect(pid_));
  // The table first, while the process is parked: from its unpark on, no region it has not got
  // can be touched without waiting, and should this session end with loads pending, the
  // interposer ends the process (op_cow_end) instead of letting it run on.
  if (table_) GCR_TRY(client->cow_begin(table_->fd(), table_->count()));
  ports_.pause("load-table");
  GCR_TRY(client->unpark(regions).context("giving restored process " + std::to_string(pid_) +
                                          " its memory"));
  GCR_TRY(client->resume());
  if (!host_pages_) let_keeper_go();  // else once the host memory is in
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
    for (auto& c : clients_) (void)c->cow_end();
  }
  for (auto& c : clients_) {
    Status closed = c->close();
    if (!job_) GCR_TRY(std::move(closed));
  }
  clients_.clear();
  return ok();
}

Status RestoreTransaction::finish_loading(const std::string& who) {
  loader_->resumed();
  ports_.progress(who + " resumed; loading the rest of its memory");
  // The first "bytes loading" says the process runs (a migration's source hears it: Note [A rank
  // moved while its job runs] in job_move.h).
  ports_.progress(bytes_progress("loading", loader_->loaded_bytes(), rep_.region_bytes));
  open_lock_.release();  // the process runs: out of its way now (TcpLock::open)
  ports_.pause("loading");
  while (!loader_->wait_for(std::chrono::milliseconds(100))) {
    ports_.progress(bytes_progress("loading", loader_->loaded_bytes(), rep_.region_bytes));
    // Note [Host memory restored lazily]: a daemon that died must not wait for the device load.
    // (No daemon: it has ended well, as LazyPages::poll says of one that never ran.)
    if (auto host = lazy_ ? lazy_->poll() : std::optional<Status>(ok())) {
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
  ports_.progress("process " + std::to_string(pid_) +
                  " runs; bringing in the rest of its host memory");
  GCR_TRY(lazy_ ? lazy_->wait() : ok());
  if (host_pages_) {
    host_pages_->join();
    const HostPageServer::Stats hs = host_pages_->stats();
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
  let_keeper_go();
  for (auto& k : tree_keepers_)
    if (k) k->done();
  // Note [gcrd owns lineage]: the restored process's next checkpoint may build on this one.
  ports_.record_lineage(pid_, rep_.id);
  if (loader_) {
    rep_.store_read_bytes = loader_->store_read_bytes();
    rep_.shared_bytes = loader_->shared_bytes();
  }
  record_phase(rep_, "total", t0_);
}

// The undo of criu: from CRIU on, a failure must not leave a process running on memory it never
// got. With lazy host memory every restored task (not only those under gcr) may be missing pages.
void RestoreTransaction::end_restored() {
  if (job_ || lazy_host_ || lazy_running())
    ports_.processes.kill_tree(pid_);
  else if (pid_ > 1)
    ports_.processes.kill(pid_);
  for (pid_t other : rep_.tree_pids) {
    ports_.processes.kill_tree(other);
    ports_.processes.wait_gone(other);
  }
  ports_.processes.wait_gone(pid_);
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

}  // namespace gcr::gcrd
