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

Result<RestoreReport> restore_checkpoint(store::Store& store, const criu::Tools& tools,
                                         const RestoreRequest& req, const Progress& progress) {
  auto t0 = Clock::now();
  store::CheckpointId id;
  if (req.arriving) {
    auto full = store::Id128::from_hex(req.name);
    if (!full || req.name.size() != 32)
      return Error{Errc::protocol, "an arriving checkpoint is named by its full id"};
    id = *full;
  } else {
    GCR_TRY_ASSIGN(id, store.resolve(req.name));
  }
  GCR_TRY_ASSIGN(auto reader, store.open_checkpoint(id, req.arriving));
  const store::Manifest& m = reader->manifest();
  RestoreReport rep;
  rep.id = id.hex();
  rep.kind = m.meta_or("kind", "gcr");
  const std::string owner = m.meta_or("owner_uid");
  if (req.client_uid != 0 && owner != std::to_string(req.client_uid))
    return Error{Errc::permission_denied,
                 "checkpoint " + rep.id.substr(0, 12) + " belongs to " +
                     (owner.empty() ? std::string("no recorded owner (an older gcr wrote it)")
                                    : "uid " + owner) +
                     "; only root or its owner may restore it"};
  GCR_TRY_ASSIGN(Gpu * gpu, Gpu::get());
  if (req.device && (*req.device < 0 || *req.device >= gpu->device_count()))
    return Error{Errc::invalid_argument, "--device " + std::to_string(*req.device) +
                                             ": this machine has " +
                                             std::to_string(gpu->device_count()) + " GPU(s)"};

  // Where each GPU of the checkpoint goes.
  std::set<int> used_devices;
  for (const auto& obj : m.objects)
    if (obj.kind == store::ObjectKind::device_region)
      used_devices.insert(static_cast<int>(obj.device));
  if (!req.device_map.empty()) {
    for (int d : used_devices)
      if (!req.device_map.contains(d))
        return Error{Errc::invalid_argument, "--device-map does not say where GPU " +
                                                 std::to_string(d) + " of checkpoint " +
                                                 rep.id.substr(0, 12) +
                                                 " goes; name every GPU "
                                                 "it used"};
    for (const auto& [from, to] : req.device_map)
      if (to < 0 || to >= gpu->device_count())
        return Error{Errc::invalid_argument, "--device-map " + std::to_string(from) + "=" +
                                                 std::to_string(to) + ": this machine has " +
                                                 std::to_string(gpu->device_count()) + " GPU(s)"};
  }
  auto target_of = [&](std::uint32_t device) {
    if (req.device) return *req.device;
    auto it = req.device_map.find(static_cast<int>(device));
    return it == req.device_map.end() ? static_cast<int>(device) : it->second;
  };
  // Device memory first: if it cannot be had, nothing has been started yet.
  std::vector<control::RegionRecord> records;
  std::vector<MappedAllocation> allocations;
  std::map<int, std::uint64_t> need;
  for (const auto& obj : m.objects)  // what is staged holds its memory already
    if (obj.kind == store::ObjectKind::device_region && !is_staged(m, obj, target_of(obj.device)))
      need[target_of(obj.device)] += obj.size;
  for (const auto& [dev, bytes] : need) {
    if (dev >= gpu->device_count())
      return Error{Errc::invalid_argument,
                   "checkpoint " + rep.id.substr(0, 12) + " used GPU " + std::to_string(dev) +
                       ", which this machine does not have; pick one with --device"};
    if (bytes > gpu->free_bytes(dev))
      return Error{Errc::out_of_memory,
                   "checkpoint needs " + std::to_string(bytes >> 20) + " MiB on GPU " +
                       std::to_string(dev) + ", which has " +
                       std::to_string(gpu->free_bytes(dev) >> 20) +
                       " MiB free; free memory there or pick another with --device"};
  }
  // Note [Job checkpoint] (job.h): a job's regions belong to its members by name, and a shared
  // allocation is stored once and given to every member that mapped it. Loading on demand, each
  // member waits in a table of its own; a shared allocation is loaded once for all its views.
  const std::string job_members = m.meta_or("job_members");
  const bool job = !job_members.empty();
  // Note [A job of several trees] (job.h): the trees after the first, each restored by a CRIU of
  // its own with its original pids, and the sockets between them connected again.
  GCR_TRY_ASSIGN(std::vector<JobTree> job_trees, decode_job_trees(m.meta_or("job_trees")));
  GCR_TRY_ASSIGN(std::vector<JobSocket> job_sockets, decode_job_sockets(m.meta_or("job_sockets")));
  const bool several_trees = job_trees.size() > 1;
  if (several_trees) {
    if (req.external_criu)
      return Error{Errc::invalid_argument, "checkpoint " + rep.id.substr(0, 12) +
                                               " is a job of several process trees: restore it "
                                               "with gcr restore"};
    if (req.new_pid_namespace)
      return Error{Errc::unsupported,
                   "checkpoint " + rep.id.substr(0, 12) +
                       " is a job of several process trees, which gcr restores with their "
                       "original pids only (a PID namespace holds one tree): leave out "
                       "--new-pid-namespace"};
  }
  // The pids the trees' roots must get back; checked before anything is loaded, and again when
  // CRIU is about to run.
  auto job_pid_in_use = [&]() -> Status {
    for (const JobTree& t : job_trees)
      if (several_trees && (kill(t.pid, 0) == 0 || errno == EPERM))
        return Error{Errc::busy, "pid " + std::to_string(t.pid) + " of checkpoint " +
                                     rep.id.substr(0, 12) +
                                     "'s job is in use, and a job of several process trees is "
                                     "restored with its original pids: end what holds it"};
    return ok();
  };
  GCR_TRY(job_pid_in_use());
  GCR_TRY_ASSIGN(std::vector<SharedView> shared_views,
                 decode_shared_views(m.meta_or("shared_views")));
  const bool eager = req.eager;
  // Allocate everything first (cheap: no bytes move), then load: eagerly here, or on the
  // loader's thread while CRIU runs (Note [On-demand restore] in gcr/cow_table.h).
  auto tl = Clock::now();
  std::vector<store::ObjectEntry> objects;
  std::set<std::uint64_t> staged_at;  // regions on the GPU already (Note [Staged restore])
  for (const auto& obj : m.objects) {
    if (obj.kind != store::ObjectKind::device_region) continue;
    int dev = target_of(obj.device);
    GCR_TRY(gpu->use(dev));
    MappedAllocation a;
    if (auto staged = job ? std::nullopt : take_staged(m, obj, dev)) {
      a = std::move(*staged);
      staged_at.insert(obj.address);
    } else {
      GCR_TRY_ASSIGN(a, MappedAllocation::create(obj.size, dev));
    }
    records.push_back({obj.address, obj.size, static_cast<std::uint32_t>(dev), 0});
    rep.region_bytes += obj.size;
    allocations.push_back(std::move(a));
    objects.push_back(obj);
  }
  if (!staged_at.empty()) drop_staged();  // what the restore did not take
  order_by_first_touch(m, objects, records, allocations);
  record_phase(rep, "allocate", tl);
  std::vector<Loader::Item> items;
  std::vector<control::RegionRecord> load_records;  // the table's: what is still to load
  for (std::size_t i = 0; i < objects.size(); ++i) {
    if (staged_at.contains(objects[i].address)) continue;
    items.push_back({objects[i], &allocations[i]});
    load_records.push_back(records[i]);
  }
  rep.staged_bytes = 0;
  for (const auto& o : objects)
    if (staged_at.contains(o.address)) rep.staged_bytes += o.size;

  std::vector<MemberPlan> plan;
  if (job) {
    GCR_TRY_ASSIGN(plan, plan_job(job_members, shared_views, objects, allocations));
  }
  std::optional<CowTable> table;
  std::vector<Loader::Watch> watches;  // a job's: one table per member
  std::unique_ptr<Loader> loader;
  if (!items.empty()) {
    if (!eager && !job) {
      GCR_TRY_ASSIGN(CowTable t, CowTable::create(load_records, cow::kLoad));
      table.emplace(std::move(t));
    }
    if (!eager && job) {
      for (MemberPlan& mp : plan) {
        if (mp.records.empty()) continue;
        GCR_TRY_ASSIGN(CowTable t, CowTable::create(mp.records, cow::kLoad));
        mp.table.emplace(std::move(t));
      }
      for (const MemberPlan& mp : plan) {
        if (!mp.table) continue;
        Loader::Watch w{&*mp.table, std::vector<std::int64_t>(objects.size(), -1)};
        for (std::size_t j = 0; j < mp.items.size(); ++j)
          w.entry_of[mp.items[j]] = static_cast<std::int64_t>(j);
        watches.push_back(std::move(w));
      }
    }
    GCR_TRY_ASSIGN(auto own_reader, store.open_checkpoint(id, req.arriving));
    // Note [Loading behind the restore] (loader.h): on demand, CRIU's restore goes first.
    GCR_TRY_ASSIGN(loader, Loader::start(std::move(own_reader), std::move(items),
                                         table ? &*table : nullptr, std::move(watches), !eager));
    progress(std::string(eager ? "loading " : "loading on demand ") +
             std::to_string((rep.region_bytes - rep.staged_bytes) >> 20) + " MiB of device memory" +
             (rep.staged_bytes ? " (" + std::to_string(rep.staged_bytes >> 20) + " MiB staged)"
                               : std::string()));
    if (eager) {
      GCR_TRY(loader->wait());
      record_phase(rep, "load", tl);
      record_phase(rep, "full", t0);
    }
  }
  // A failure from here on stops the loader (its destructor) before the allocations go.

  const bool external = static_cast<bool>(req.external_criu);
  if (!external && m.meta_or("criu_images") == "external")
    return Error{Errc::unsupported,
                 "checkpoint " + rep.id.substr(0, 12) +
                     " holds the device memory of a container checkpoint; its CRIU images are in "
                     "the runtime's checkpoint (runc --image-path, podman's export): restore it "
                     "there, with gcr's CRIU plugin"};
  if (external && m.meta_or("criu_images") != "external")
    return Error{Errc::invalid_argument,
                 "checkpoint " + rep.id.substr(0, 12) +
                     " was made by gcr checkpoint with its own CRIU images: restore it with gcr "
                     "restore, not through a container runtime"};
  auto tm = Clock::now();
  std::optional<WorkDir> work;
  criu::LazyPages lazy;  // after work: its images are read until the daemon ends
  // Note [Host memory from the store] (host_pages.h). On the way out the server hangs up before
  // the daemon is reaped (killed first, should it still run).
  std::unique_ptr<HostPages> host_pages;
  UniqueFd daemon_end;  // the daemon's end of host_pages' socket, until CRIU has started it
  std::optional<FillingScope> filling_scope;
  Clock::time_point th;
  // --eager: nothing arrives after the process runs, host memory included.
  const bool lazy_wanted =
      !external && !eager && !several_trees && criu::lazy_pages_available(tools);
  if (lazy_wanted && host_pages_from_store()) {
    if (auto planned = HostPages::plan(*reader)) {
      host_pages = std::move(planned).value();
    } else {
      std::fprintf(stderr, "gcrd: checkpoint %s: its host memory comes from CRIU's images (%s)\n",
                   rep.id.substr(0, 12).c_str(), planned.error().message.c_str());
    }
  }
  if (!external) {
    GCR_TRY_ASSIGN(WorkDir w, WorkDir::create("restore"));
    work.emplace(std::move(w));
    GCR_TRY(host_pages ? reader->materialize_files(work->path(), host_pages->left_out())
                       : reader->materialize_files(work->path()));
  }
  record_phase(rep, "materialize", tm);
  if (host_pages) {
    GCR_TRY_ASSIGN(auto own_reader, store.open_checkpoint(id, req.arriving));
    GCR_TRY_ASSIGN(daemon_end, host_pages->serve(std::move(own_reader)));
  }
  // Guarded from CRIU's start (Note [Parked memory outlives gcrd], keeper.h): a process with
  // device memory to get, or host memory gcrd serves.
  const bool guarded = !records.empty() || host_pages;

  auto env = driver_env();
  if (!req.device_map.empty()) {
    // The driver's restore needs a pair for every GPU the process used (device 0 when the image
    // holds none): those of the map.
    std::string pairs;
    for (const auto& [from, to] : req.device_map)
      pairs += (pairs.empty() ? "" : ",") + std::to_string(from) + "=" + std::to_string(to);
    env["GCR_DEVICE_MAP"] = pairs;
  } else if (req.device) {
    // The driver's restore needs a pair for every GPU the process used: those its regions were on
    // (device 0 when the image holds none, as a --stop-copy image does).
    std::set<int> used;
    for (const auto& obj : m.objects)
      if (obj.kind == store::ObjectKind::device_region) used.insert(static_cast<int>(obj.device));
    if (used.empty()) used.insert(0);
    if (used.size() > 1)
      return Error{Errc::unsupported, "checkpoint " + rep.id.substr(0, 12) + " used " +
                                          std::to_string(used.size()) +
                                          " GPUs; --device moves a single-GPU process: give each "
                                          "GPU its place with --device-map"};
    env["GCR_DEVICE_MAP"] = std::to_string(*used.begin()) + "=" + std::to_string(*req.device);
  }
  if (loader && loader->failed()) return loader->wait().error();  // before any process exists
  pid_t pid = 0;
  Result<Keeper> keeper = Keeper();
  std::vector<Keeper> tree_keepers;  // the other trees' (Note [A job of several trees])
  auto trees_done = [&] {
    for (Keeper& k : tree_keepers) k.done();
  };
  if (external) {
    // Note [Parked memory outlives gcrd] (keeper.h): from the moment the tasks exist, a gcrd that
    // dies before they have their memory takes them with it.
    if (!records.empty()) keeper = Keeper::start_restore(std::filesystem::path());
    if (!keeper) return std::move(keeper).error();
    progress("the runtime's CRIU restores the process");
    auto tc = Clock::now();
    auto restored = req.external_criu();
    if (!restored) {
      keeper->done();  // no task it could name
      return std::move(restored).error();
    }
    pid = *restored;
    record_phase(rep, "criu", tc);
    if (!records.empty())
      if (Status s = keeper->restored(pid); !s) keeper = std::move(s).error();
    // A runtime restores a container's tasks into its own pid namespace: members by their pids
    // there.
    rep.new_pid_namespace = innermost_pid(pid) != pid;
  } else {
    // The restored process takes its old pid: while something holds it, restore into a PID
    // namespace of its own. One decision and CRIU run at a time, so that two restores of one image
    // do not both find the pid free.
    static std::mutex criu_mu;
    std::unique_lock criu_lock(criu_mu);
    rep.original_pid = static_cast<pid_t>(std::atoll(m.meta_or("pid", "0").c_str()));
    rep.new_pid_namespace = req.new_pid_namespace;
    GCR_TRY(job_pid_in_use());  // Note [A job of several trees]: taken meanwhile?
    if (!rep.new_pid_namespace && rep.original_pid > 0 &&
        (kill(rep.original_pid, 0) == 0 || errno == EPERM)) {
      rep.new_pid_namespace = true;
      progress("pid " + std::to_string(rep.original_pid) +
               " is in use: restoring into a new PID namespace");
    }
    if (rep.new_pid_namespace && geteuid() != 0)
      return Error{
          Errc::unsupported,
          (req.new_pid_namespace ? std::string("--new-pid-namespace")
                                 : "pid " + std::to_string(rep.original_pid) + " is in use, so") +
              " the restore needs a PID namespace of its own, which only root's gcrd can "
              "make (unshare needs CAP_SYS_ADMIN): end what holds the pid, or restore as "
              "root"};
    // Note [Parked memory outlives gcrd] in keeper.h: should gcrd die before the process holds its
    // memory (or the table that makes it wait for it), the keeper ends it; from now, as CRIU may
    // finish restoring it after gcrd is gone.
    if (guarded)
      keeper = Keeper::start_restore(
          rep.new_pid_namespace ? std::filesystem::path() : work->path() / "restored.pid",
          host_pages ? host_pages->server_fd() : -1);
    if (!keeper) return std::move(keeper).error();
    progress("restoring the process with CRIU");
    auto tc = Clock::now();
    criu::RestoreOptions ro;
    ro.image_dir = work->path();
    ro.env = env;
    ro.restored_pid = &pid;
    ro.new_pid_namespace = rep.new_pid_namespace;
    ro.shell_job = m.meta_or("shell_job") == "1";
    ro.tcp_close = m.meta_or("tcp_close") == "1";
    if (lazy_wanted) ro.lazy_pages = &lazy;
    if (host_pages) ro.lazy_pages_socket = daemon_end.get();
    ro.before_criu = [] { pause_point("lazy-pages"); };
    std::vector<UniqueFd> relays;  // gcrd's ends of the relays, closed once CRIU has its own
    for (const auto& in : req.inherit) {
      int fd = in.fd.get();
      // Note [Streams reconnected by rule]: CRIU reopens an inherited pipe through /proc, as
      // root: anything but an anonymous pipe gets a pipe of gcrd's that copies into it.
      if (in.key.rfind("pipe:[", 0) == 0 && !may_reopen_as_pipe(fd)) {
        auto w = relay_into(fd);
        if (!w) {
          keeper->done();  // no process to guard
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
    for (const JobSocket& js : job_sockets) {
      int sv[2];
      if (::socketpair(AF_UNIX, js.type | SOCK_CLOEXEC, 0, sv) != 0) {
        Error e = errno_error("connecting the job's trees again (socketpair)");
        keeper->done();  // no process to guard
        return e;
      }
      socket_ends.emplace_back(sv[0]);
      socket_ends.emplace_back(sv[1]);
      ro.inherit.push_back({"socket:[" + std::to_string(js.ino) + "]", sv[0]});
      ro.inherit.push_back({"socket:[" + std::to_string(js.peer_ino) + "]", sv[1]});
    }
    // The keeper follows a restore into a new PID namespace (it has no pidfile) and one whose
    // host memory gcrd serves. A page gcrd cannot serve while CRIU restores: the tasks, CRIU's so
    // far, are ended with CRIU (they have not run the program yet) rather than let CRIU go on with
    // what the daemon, told, leaves as zeros.
    ro.on_spawned = [&, ready = work->path() / "restored.ready"](pid_t spawned) {
      auto follow = [](Status s) {
        if (!s)
          std::fprintf(stderr, "gcrd: the restore's keeper cannot follow it: %s\n",
                       s.error().message.c_str());
      };
      if (rep.new_pid_namespace && keeper && guarded)
        follow(keeper->restoring_in_namespace(spawned, ready));
      if (!host_pages) return;
      if (keeper) follow(keeper->restoring_in(spawned));
      host_pages->on_failure([spawned] { criu::kill_tree(spawned); });
    };
    if (Status restored = criu::restore(tools, ro); !restored) {
      keeper->done();  // no process to guard
      if (host_pages)
        if (auto e = host_pages->failure()) {
          Error err = *e;
          err.message += "; the restore was ended (the checkpoint itself is unchanged)";
          return err;
        }
      return std::move(restored).error();
    }
    if (pid <= 1) {
      keeper->done();
      return Error{Errc::internal, "CRIU restored checkpoint " + rep.id.substr(0, 12) +
                                       " but named no pid for it (see restore.log)"};
    }
    if (several_trees)
      if (Status s =
              restore_other_trees(tools, ro, work->path(), job_trees, guarded, rep, tree_keepers);
          !s) {
        criu::kill_tree(pid);
        wait_gone(pid);
        keeper->done();
        return std::move(s).context("the checkpoint's other process trees").error();
      }
    criu_lock.unlock();
    relays.clear();
    socket_ends.clear();
    daemon_end.reset();  // the daemon's now; its exit is the server's end
    record_phase(rep, "criu", tc);
    th = tc;
    if (lazy.running()) filling_scope.emplace(criu::tree_pids(pid));
    if (guarded)
      if (Status s = keeper->restored(pid); !s) keeper = std::move(s).error();
    if (host_pages) host_pages->on_failure([pid] { criu::kill_tree(pid); });
  }
  rep.pid = pid;
  if (loader) loader->resumed();  // Note [Loading behind the restore]: CRIU's part is done
  pause_point("restored");
  // From here, a failure must not leave a process running on device memory it never got.
  // With lazy host memory every restored task (not only those under gcr) may be missing pages.
  const bool lazy_host = lazy.running();
  std::optional<Clock::time_point> host_done;  // when the daemon was seen to have ended well
  auto kill_restored = [&](Error e) -> Error {
    // A page gcrd could not serve is the cause of whatever failed after it (a process that died
    // on what the daemon, told, left as zeros).
    if (host_pages)
      if (auto f = host_pages->failure()) e = *f;
    if (job || lazy_host)
      criu::kill_tree(pid);
    else if (pid > 1)
      kill(pid, SIGKILL);
    for (pid_t other : rep.tree_pids) {
      criu::kill_tree(other);
      wait_gone(other);
    }
    wait_gone(pid);
    e.message += "; killed it: restored process " + std::to_string(pid) +
                 " cannot run without its " + (lazy_host ? "memory" : "device memory") +
                 " (the checkpoint itself is unchanged)";
    return e;
  };

  // A page gcrd could not serve while CRIU restored (the daemon was told, and gave up): the
  // process has not run yet (it is parked) and must not.
  if (host_pages)
    if (auto e = host_pages->failure()) return kill_restored(*e);

  // On demand: the process (every member of a job) runs while the loader goes on. The caller
  // ends a failed load's process before anything releases its waiters (cow_end): it never runs on
  // bytes it did not get.
  auto finish_loading = [&](const std::string& who) -> Status {
    loader->resumed();
    progress(who + " resumed; loading the rest of its memory");
    pause_point("loading");
    while (!loader->wait_for(std::chrono::milliseconds(100))) {
      progress(bytes_progress("loading", loader->loaded_bytes(), rep.region_bytes));
      // Note [Host memory restored lazily]: a daemon that died must not wait for the device load.
      if (auto host = lazy.poll()) {
        if (!*host) return std::move(*host).error();
        if (!host_done) host_done = Clock::now();
      }
    }
    GCR_TRY(loader->wait());
    record_phase(rep, "load", tl);
    record_phase(rep, "full", t0);
    rep.wanted_regions = loader->wanted_regions();
    return ok();
  };
  // Note [Job checkpoint]: every member of a gcr checkpoint was parked, with device memory or not.
  if (job && (!records.empty() || rep.kind == "gcr")) {
    auto tu = Clock::now();
    if (!keeper) return kill_restored(Error(keeper.error()));
    auto clients = give_job_its_memory(pid, rep, plan, allocations);
    if (!clients) return kill_restored(std::move(clients).error());
    if (!host_pages) keeper->done();  // else once the host memory is in
    trees_done();
    record_phase(rep, "unpark", tu);
    record_phase(rep, "resume", t0);
    if (!eager && !records.empty()) {
      if (Status s = finish_loading("job " + std::to_string(pid)); !s)
        return kill_restored(std::move(s).error());
      for (control::Client& c : *clients) (void)c.cow_end();
    } else if (records.empty()) {
      record_phase(rep, "full", t0);
    }
    for (control::Client& c : *clients) (void)c.close();
  } else if (!records.empty() || rep.kind == "gcr") {
    // A process that held no device memory was parked all the same: its CUDA calls wait at its
    // closed gate until it is given its (empty) park back.
    auto tu = Clock::now();
    std::vector<control::ParkedRegion> regions;
    for (std::size_t i = 0; i < records.size(); ++i) {
      auto fd = allocations[i].export_fd();
      if (!fd) return kill_restored(std::move(fd).error());
      regions.push_back({records[i], std::move(fd).value()});
    }
    if (!keeper) return kill_restored(Error(keeper.error()));
    auto client = control::Client::connect(pid, std::chrono::seconds(10));
    if (!client) return kill_restored(std::move(client).error());
    // The table first, while the process is parked: from its unpark on, no region it has not got
    // can be touched without waiting, and should this session end with loads pending, the
    // interposer ends the process (op_cow_end) instead of letting it run on.
    if (table)
      if (Status s = client->cow_begin(table->fd(), table->count()); !s)
        return kill_restored(std::move(s).error());
    pause_point("load-table");
    if (Status s = client->unpark(regions); !s)
      return kill_restored(
          std::move(s)
              .context("giving restored process " + std::to_string(pid) + " its memory")
              .error());
    if (Status s = client->resume(); !s) return kill_restored(std::move(s).error());
    if (!host_pages) keeper->done();  // else once the host memory is in
    record_phase(rep, "unpark", tu);
    record_phase(rep, "resume", t0);
    if (table) {
      if (Status s = finish_loading("process " + std::to_string(pid)); !s)
        return kill_restored(std::move(s).error());
      (void)client->cow_end();
    } else if (records.empty()) {
      record_phase(rep, "full", t0);
    }
    if (Status s = client->close(); !s) return kill_restored(std::move(s).error());
  } else {
    record_phase(rep, "resume", t0);
    record_phase(rep, "full", t0);
  }
  if (lazy_host) {
    // Note [Host memory restored lazily] (gcr/criu.h): a daemon that failed left zeros where the
    // rest of the process's memory should be; it must not run on them.
    progress("process " + std::to_string(pid) + " runs; bringing in the rest of its host memory");
    if (Status s = lazy.wait(); !s) return kill_restored(std::move(s).error());
    if (host_pages) {
      host_pages->join();
      const HostPages::Stats& hs = host_pages->stats();
      rep.host_served_bytes = hs.bytes;
      std::fprintf(stderr,
                   "gcrd: restore %s: served %llu MiB of host memory in %llu requests (%lld ms "
                   "reading the store, %lld ms sending)\n",
                   rep.id.substr(0, 12).c_str(),
                   static_cast<unsigned long long>(rep.host_served_bytes >> 20),
                   static_cast<unsigned long long>(hs.requests),
                   static_cast<long long>(hs.read_ns / 1'000'000),
                   static_cast<long long>(hs.send_ns / 1'000'000));
    }
    auto host_ns = [&](Clock::time_point from) {
      return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                            host_done.value_or(Clock::now()) - from)
                                            .count());
    };
    record_phase(rep, "host", th);
    rep.times_ns["host"] = host_ns(th);
    rep.times_ns["full"] = std::max(rep.times_ns["full"], host_ns(t0));
    rep.lazy_host = true;
    rep.host_from_store = static_cast<bool>(host_pages);
  }
  filling_scope.reset();
  if (keeper) keeper->done();
  trees_done();
  // Note [gcrd owns lineage]: the restored process's next checkpoint may build on this one.
  if (auto key = process_key(pid)) lineage_record(*key, rep.id);
  if (loader) {
    rep.store_read_bytes = loader->store_read_bytes();
    rep.shared_bytes = loader->shared_bytes();
  }
  record_phase(rep, "total", t0);
  return rep;
}

}  // namespace gcr::gcrd
