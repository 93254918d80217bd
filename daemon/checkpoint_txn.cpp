// Note [Checkpoint phases] (checkpoint_txn.h).
#include "checkpoint_txn.h"

#include <fcntl.h>
#include <unistd.h>

#include <set>
#include <tuple>

#include "gcrd_protocol.h"
#include "hex_address.h"
#include "phase_clock.h"

namespace gcr::gcrd {

namespace {

// Comma-separated hex addresses, each once, in order (META touch_order, read by restore.cpp).
std::string format_touch_order(const std::vector<std::uint64_t>& order) {
  std::string out;
  std::set<std::uint64_t> seen;
  for (std::uint64_t a : order) {
    if (!seen.insert(a).second) continue;
    char b[24];
    std::snprintf(b, sizeof b, "%s%llx", out.empty() ? "" : ",",
                  static_cast<unsigned long long>(a));
    out += b;
  }
  return out;
}

using Key = std::pair<std::size_t, std::uint64_t>;  // (member, address)

}  // namespace

// One member's parked regions and what became of them.
struct CheckpointTransaction::Member {
  std::vector<control::ParkedRegion> parked;
  bool is_parked = false;  // park() returned its regions
  bool released = false;   // it has them back (released, or given back by an undo)
  std::vector<std::unique_ptr<HeldMemory>> held;  // by parked index; null: a view stored elsewhere
};

Result<PinnedHostMemory> ask_pinned(JobSessions& sessions, const std::vector<bool>& registered,
                                    bool frozen) {
  PinnedHostMemory out;
  for (std::size_t i = 0; i < sessions.size(); ++i) {
    auto dma = sessions.host_dma(i);
    if (!dma && dma.error().code != Errc::unsupported) return std::move(dma).error();
    if (dma && dma->touched && !frozen) {  // its own table has no cap
      for (const control::HostDmaRange& r : dma->ranges) out.touched_bytes += r.bytes;
    } else if (dma && !dma->overflow) {
      if (!dma->ranges.empty()) out.ranges[sessions.pid(i)] = std::move(dma->ranges);
    } else if (registered[i] || dma) {
      out.untrackable = sessions.pid(i);
    }
  }
  return out;
}

CheckpointTransaction::CheckpointTransaction(const CheckpointRequest& request, CheckpointPlan plan,
                                             CheckpointPorts ports)
    : req_(request),
      plan_(std::move(plan)),
      ports_(std::move(ports)),
      tx_("the checkpoint of process " + std::to_string(request.pid), ports_.limit, ports_.now) {
  rep_.pid = req_.pid;
  rep_.kind = "gcr";
  rep_.processes = ports_.sessions.size();
  rep_.shared_regions = plan_.shared.size();
  end_after_commit_ = !req_.leave_running && !plan_.external;
  members_.resize(ports_.sessions.size());
}

// The undos need every member of this object: they run before any is destroyed.
CheckpointTransaction::~CheckpointTransaction() {
  tx_.abort();
}

std::string CheckpointTransaction::process_state() const {
  const std::string& p = tx_.phase();
  if (p == "prepare" || p == "cut" || p == "quiesce") return "running";
  if (p == "park") return "quiesced";
  if (p == "hold" || p == "epoch" || p == "dump" || p == "release") return "parked";
  if (p == "select") return end_after_commit_ ? "stopped" : "parked";
  if (p == "drain" || p == "commit" || p == "finish")
    return req_.leave_running ? "draining" : end_after_commit_ ? "stopped" : "parked";
  return "running";  // committed or aborted: the transaction is over
}

std::string CheckpointTransaction::name() const {
  return "process " + std::to_string(req_.pid);
}

Status CheckpointTransaction::prepare() {
  return after_failure(prepare_phases());
}

Status CheckpointTransaction::commit() {
  return after_failure(commit_phases());
}

Status CheckpointTransaction::prepare_phases() {
  GCR_TRY(tx_.run("prepare", [&] { return begin(); }));
  GCR_TRY(tx_.run("cut", [&] { return cut(); }));
  GCR_TRY(tx_.run("quiesce", [&] { return quiesce(); }));
  GCR_TRY(tx_.run("park", [&] { return park(); }));
  GCR_TRY(tx_.run("hold", [&] { return hold(); }));
  GCR_TRY(tx_.run("epoch", [&] { return epoch(); }));
  if (!plan_.external) GCR_TRY(tx_.run("dump", [&] { return dump(); }));
  GCR_TRY(tx_.run("select", [&] { return select(); }));
  if (req_.leave_running) GCR_TRY(tx_.run("release", [&] { return release(); }));
  record_phase(rep_, "stall", t_cut_);
  if (req_.leave_running) {  // the processes run: the rest is out of the stall
    ports_.dumper.after_resume();
    ports_.keepers.done();  // after it: they still cover gcrd's death meanwhile
  }
  return tx_.run("drain", [&] { return drain(); });
}

Status CheckpointTransaction::commit_manifest_only() {
  return after_failure(tx_.run("commit", [&] { return commit_manifest(); }));
}

Status CheckpointTransaction::finish_commit() {
  GCR_TRY(after_failure(tx_.run("finish", [&] { return finish(); })));
  tx_.commit();
  return ok();
}

void CheckpointTransaction::set_meta(const std::string& key, const std::string& value) {
  writer_->set_meta(key, value);
}

Status CheckpointTransaction::commit_phases() {
  GCR_TRY(tx_.run("commit", [&] { return commit_manifest(); }));
  GCR_TRY(tx_.run("finish", [&] { return finish(); }));
  tx_.commit();
  return ok();
}

// A process CRIU left stopped, whose checkpoint then failed, was let go and given its memory back
// by the undos: the error says it runs on.
Status CheckpointTransaction::after_failure(Status failed) {
  if (failed || !dumped_ || !end_after_commit_) return failed;
  for (const Member& m : members_)
    if (m.is_parked && !m.released) return failed;
  Error e = std::move(failed).error();
  e.message += "; process " + std::to_string(req_.pid) + " runs on";
  return e;
}

// --- prepare: the store and CRIU, before anything stops ------------------------------------------

Status CheckpointTransaction::begin() {
  // Before the cut, so that waiting for the store (a long `gcr image gc` holds gc.lock) never
  // stalls the process: it runs on until everything the checkpoint needs is in hand.
  GCR_TRY_ASSIGN(writer_, ports_.store.begin(plan_.meta, plan_.parent));
  tx_.on_undo("the checkpoint begun in the store", [this] { writer_.reset(); });
  if (plan_.external) writer_->set_meta("criu_images", "external");
  t_begin_ = Clock::now();  // the total includes CRIU's start; the stall does not
  tx_.on_undo("CRIU started", [this] { ports_.dumper.cancel(); });
  GCR_TRY_ASSIGN(bool started, ports_.dumper.prepare(plan_.pinned, ports_.progress));
  if (started) record_phase(rep_, "criu_start", t_begin_);
  rep_.images_in = ports_.dumper.images_in();
  return ok();
}

// --- cut, quiesce, park: the stall begins --------------------------------------------------------

Status CheckpointTransaction::cut() {
  t_cut_ = Clock::now();
  if (plan_.shared.empty() && !plan_.cut_over_tcp) return ok();
  GCR_TRY(ports_.sessions.cut(req_.quiesce_timeout, ports_.progress));
  record_phase(rep_, "cut", t_cut_);
  return ok();
}

Status CheckpointTransaction::quiesce() {
  JobSessions& s = ports_.sessions;
  ports_.progress(plan_.job ? "quiescing " + std::to_string(s.size()) + " processes of job " +
                                  std::to_string(req_.pid)
                            : "quiescing process " + std::to_string(req_.pid));
  Status q = s.quiesce(req_.quiesce_timeout);
  s.end_cut();  // launches held by the cut now wait at the closed gate
  if (!q) return std::move(q).context("quiescing process " + std::to_string(req_.pid));
  tx_.on_undo("the members quiesced", [this] {
    for (std::size_t i = 0; i < ports_.sessions.size(); ++i)
      if (ports_.sessions.is_open(i)) (void)ports_.sessions.resume(i);
  });
  record_phase(rep_, "quiesce", t_cut_);
  ports_.pause("quiesced");
  // Note [First-touch order]: what the process touched first since its last cut; with
  // --leave-running, what it touches first after this one is put before it at the end.
  if (auto order = s.touch_order(0)) touch_order_ = std::move(order).value();
  return ok();
}

// Gives every parked member its regions back; whether all took them.
bool CheckpointTransaction::give_all_back() {
  bool all = true;
  for (std::size_t i = 0; i < members_.size(); ++i) {
    Member& m = members_[i];
    if (!m.is_parked || m.released) continue;
    bool back = ports_.sessions.is_open(i) ? static_cast<bool>(ports_.sessions.unpark(i, m.parked))
                                           : ports_.sessions.give_back(i, m.parked);
    m.released = back;
    all &= back;
  }
  return all;
}

Status CheckpointTransaction::park() {
  JobSessions& s = ports_.sessions;
  auto tp = Clock::now();
  // Note [Parked memory outlives gcrd]: should a member not take its memory back, its keeper
  // gives it (and gcrd's death, before any of this, leaves it to them too).
  tx_.on_undo("the memory parked", [this] {
    if (give_all_back())
      ports_.keepers.done();
    else
      ports_.keepers.abandon();
  });
  for (std::size_t i = 0; i < s.size(); ++i) {
    GCR_TRY_ASSIGN(members_[i].parked,
                   s.park(i).context(plan_.job ? "parking process " + std::to_string(s.pid(i))
                                               : std::string("parking")));
    members_[i].is_parked = true;
  }
  record_phase(rep_, "park", tp);
  // Note [A job of several trees]: every tree's dump leaves it stopped; any keeper continues them.
  const std::vector<pid_t> stopped_roots = plan_.several_trees ? plan_.roots : std::vector<pid_t>{};
  for (std::size_t i = 0; i < s.size(); ++i)
    GCR_TRY(ports_.keepers.start(s.pid(i), members_[i].parked, stopped_roots)
                .context("protecting the parked memory against gcrd's death"));
  return ok();
}

// --- hold: what gcrd stores, imported ------------------------------------------------------------

bool CheckpointTransaction::is_shared(std::size_t m, std::uint64_t address) const {
  return shared_at_.contains({m, address});
}

// Whether member m's region r is stored by this checkpoint (else it comes from the parent).
bool CheckpointTransaction::must_store(std::size_t m, const control::RegionRecord& r) const {
  if (is_shared(m, r.address)) return shared_to_write_.contains({m, r.address});
  return (r.flags & control::kRegionDirty) || !plan_.parent;
}

// Note [Shared memory written job-wide] (interpose/regions.h): a shared allocation no view wrote
// since the parent comes from the parent, under the view it was stored as there; the rest are
// stored whole.
void CheckpointTransaction::plan_shared_writes() {
  std::set<std::tuple<std::string, std::uint64_t, std::uint32_t, std::uint64_t>> in_parent;
  if (plan_.parent)
    if (auto pm = ports_.store.manifest(*plan_.parent))
      for (const auto& o : pm->objects)
        if (o.kind == store::ObjectKind::device_region)
          in_parent.insert({o.name, o.address, o.device, o.size});
  for (const SharedAllocation& a : plan_.shared) {
    bool written = false;
    for (const View& v : a.views)
      if (auto at = parked_at_.find({v.member, v.address}); at != parked_at_.end())
        written |=
            (members_[v.member].parked[at->second].region.flags & control::kRegionDirty) != 0;
      else
        written = true;
    const View& stored = a.views[0];
    auto at = parked_at_.find({stored.member, stored.address});
    if (!written && at != parked_at_.end()) {
      const auto& r = members_[stored.member].parked[at->second].region;
      written = !in_parent.contains({plan_.owners[stored.member], r.address, r.device, r.size});
    }
    if (written) shared_to_write_.insert({stored.member, stored.address});
  }
}

Status CheckpointTransaction::hold() {
  for (const SharedAllocation& a : plan_.shared) {
    for (std::size_t v = 1; v < a.views.size(); ++v)
      view_of_[{a.views[v].member, a.views[v].address}] = {a.views[0].member, a.views[0].address};
    for (const View& v : a.views) shared_at_.insert({v.member, v.address});
  }
  for (std::size_t i = 0; i < members_.size(); ++i)
    for (std::size_t j = 0; j < members_[i].parked.size(); ++j)
      parked_at_[{i, members_[i].parked[j].region.address}] = j;
  plan_shared_writes();
  // Import every region this checkpoint stores into gcrd (a shared allocation once): it is how gcrd
  // reads them. One that comes from the parent is not read; the parked fd holds its memory. (Each
  // import maps the region: an incremental checkpoint of many allocations would pay for all of
  // them in the stall.)
  for (std::size_t i = 0; i < members_.size(); ++i) {
    Member& m = members_[i];
    m.held.resize(m.parked.size());
    for (std::size_t j = 0; j < m.parked.size(); ++j) {
      const auto& p = m.parked[j];
      if (auto v = view_of_.find({i, p.region.address}); v != view_of_.end()) {
        auto stored = parked_at_.find(v->second);
        if (stored == parked_at_.end() ||
            members_[v->second.first].parked[stored->second].region.size != p.region.size)
          return Error{Errc::unsupported, "process " + std::to_string(ports_.sessions.pid(i)) +
                                              " maps part of an allocation shared with process " +
                                              std::to_string(ports_.sessions.pid(v->second.first)) +
                                              " at " + hex_address(p.region.address) +
                                              "; gcr restores shared memory mapped whole only"};
        continue;  // stored once, from the view it is stored under
      }
      ++rep_.regions;
      rep_.region_bytes += p.region.size;
      if (!must_store(i, p.region)) continue;
      rep_.dirty_bytes += p.region.size;
      GCR_TRY_ASSIGN(m.held[j], ports_.device.import(p.fd.get(), p.region.size)
                                    .context("importing region " + hex_address(p.region.address)));
    }
  }
  ports_.pause("parked");
  if (!ports_.dumper.wants_pinned()) return ok();
  // The ranges as they are with the GPU idle: none change until it runs.
  auto now = ask_pinned(ports_.sessions, plan_.registered, plan_.pinned_frozen);
  const bool known = now && !now->untrackable;
  if (known) plan_.pinned = std::move(now).value();
  return ports_.dumper.pinned_known(known ? &plan_.pinned : nullptr);
}

Status CheckpointTransaction::epoch() {
  const std::string id = writer_->id().hex();
  for (std::size_t i = 0; i < members_.size(); ++i) GCR_TRY(ports_.sessions.new_epoch(i, id));
  for (std::size_t i = 0; i < members_.size(); ++i) GCR_TRY(ports_.sessions.close(i));
  return ok();
}

// --- dump: CRIU ----------------------------------------------------------------------------------

Status CheckpointTransaction::dump() {
  ports_.progress("dumping process " + std::to_string(req_.pid) +
                  " with CRIU (device memory parked)");
  auto td = Clock::now();
  rep_.host_pinned_touched_bytes = plan_.pinned.touched_bytes;
  // CRIU takes pids: one whose member died (and which a restore may have given to the member's
  // new self) is not dumped.
  for (std::size_t i = 0; i < members_.size(); ++i)
    if (ports_.sessions.gone(i))
      return Error{Errc::not_found,
                   "process " + std::to_string(ports_.sessions.pid(i)) + " ended before its dump"};
  GCR_TRY_ASSIGN(DumpOutcome out, ports_.dumper.dump(plan_.pinned, &rep_.host_pages_pinned));
  record_phase(rep_, "dump", td);
  dumped_ = true;
  if (out.left_stopped)
    tx_.on_undo("the trees the dump left stopped", [this] { ports_.dumper.continue_trees(); });
  ports_.pause("dumped");
  if (!req_.leave_running) return ok();
  if (out.left_stopped) {  // every tree was left stopped by its dump: on with all, as one
    ports_.dumper.continue_trees();
    tx_.forget_undo("the trees the dump left stopped");
  }
  for (std::size_t i = 0; i < members_.size(); ++i) {
    GCR_TRY_ASSIGN(bool repaired, ports_.sessions.ensure_running(i));
    if (repaired && !plan_.several_trees) {
      std::string w = "the CRIU plugin left process " + std::to_string(ports_.sessions.pid(i)) +
                      "'s CUDA state locked or checkpointed after the dump (see the dump.log of "
                      "the checkpoint); gcrd restored and unlocked it";
      ports_.progress(w);
      rep_.warnings.push_back(std::move(w));
    }
  }
  return ok();
}

// --- select: what this checkpoint stores ---------------------------------------------------------

Status CheckpointTransaction::select() {
  to_store_.assign(members_.size(), {});
  {
    std::vector<SharedView> views;
    for (const auto& [view, stored] : view_of_)
      views.push_back(
          {plan_.owners[view.first], view.second, plan_.owners[stored.first], stored.second});
    views_meta_ = encode_shared_views(views);
  }
  // The regions this checkpoint stores; the rest come from the parent. A shared allocation some
  // view wrote is stored whole: before any member runs, or behind every view's entry (release).
  for (std::size_t i = 0; i < members_.size(); ++i) {
    for (std::size_t j = 0; j < members_[i].parked.size(); ++j) {
      const auto& r = members_[i].parked[j].region;
      if (view_of_.contains({i, r.address})) continue;               // a view stored elsewhere
      DrainRegion d{r, members_[i].held[j].get(), plan_.owners[i]};  // held: must_store
      if (must_store(i, r) && is_shared(i, r.address)) {
        std::vector<Key> views{{i, r.address}};
        for (const auto& [view, stored] : view_of_)
          if (stored == Key{i, r.address}) views.push_back(view);
        shared_views_of_.push_back(std::move(views));
        shared_drains_.push_back({std::move(d), {}});
      } else if (must_store(i, r)) {
        to_store_[i].push_back(std::move(d));
      } else {
        writer_->set_region_owner(plan_.owners[i]);
        GCR_TRY(writer_->add_region_from_parent(r.address, r.size, r.device));
      }
    }
  }
  return ok();
}

// --- release (-R): the process gets its memory back before gcrd has read it ----------------------

// Soft copy-on-write protects what is still to be read (Note [Soft copy-on-write] in
// gcr/cow_table.h); Note [Shared memory behind every view] (drain.h): a member's views of the
// shared allocations to store follow its own regions in its table, `reading` until gcrd has read
// the allocation.
Status CheckpointTransaction::release() {
  JobSessions& s = ports_.sessions;
  auto tu = Clock::now();
  tables_.resize(members_.size());
  // A member given its memory runs again as its session ends (a session never leaves a process
  // quiesced), its copy-on-write ended: this checkpoint can no longer be completed.
  tx_.on_undo("the sessions of the release", [this] {
    for (std::size_t i = 0; i < members_.size(); ++i) {
      if (!ports_.sessions.is_open(i)) continue;
      if (tables_[i]) (void)ports_.sessions.cow_end(i);
      (void)ports_.sessions.close(i);
    }
  });
  for (std::size_t i = 0; i < members_.size(); ++i) {
    GCR_TRY(s.reopen(i));
    // Every view of a shared allocation gets the stored view's fd (Note [Shared regions]).
    std::vector<control::ParkedRegion> back;
    for (const auto& p : members_[i].parked) {
      int fd = p.fd.get();
      if (auto v = view_of_.find({i, p.region.address}); v != view_of_.end())
        fd = members_[v->second.first].parked[parked_at_[v->second]].fd.get();
      int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
      if (copy < 0) return errno_error("duplicating a parked region's fd");
      back.push_back({p.region, UniqueFd(copy)});
    }
    GCR_TRY(s.unpark(i, back).context("giving process " + std::to_string(s.pid(i)) +
                                      " its memory back"));
    members_[i].released = true;
    std::vector<control::RegionRecord> records;
    for (const DrainRegion& d : to_store_[i]) records.push_back(d.region);
    std::vector<std::pair<std::size_t, std::uint32_t>> views;  // (allocation, entry)
    for (std::size_t k = 0; k < shared_drains_.size(); ++k)
      for (const auto& [m, address] : shared_views_of_[k]) {
        auto at = parked_at_.find({m, address});
        if (m != i || at == parked_at_.end()) continue;  // not parked: nothing maps it there
        views.push_back({k, static_cast<std::uint32_t>(records.size())});
        records.push_back(members_[i].parked[at->second].region);
      }
    if (records.empty()) continue;
    auto t = CowTable::create(records, cow::kCopyOnWrite);
    if (t)
      for (const auto& [k, entry] : views) {
        t->entry(entry).state.store(cow::kReading, std::memory_order_release);
        shared_drains_[k].views.push_back(&t->entry(entry));
      }
    GCR_TRY(t ? s.cow_begin(i, t->fd(), t->count()) : Status(t.error()));
    tables_[i].emplace(std::move(t).value());
  }
  for (std::size_t i = 0; i < members_.size(); ++i) GCR_TRY(s.resume(i));
  record_phase(rep_, "unpark", tu);
  tx_.forget_undo("the memory parked");
  return ok();
}

// --- drain: device memory, then CRIU's images ----------------------------------------------------

Status CheckpointTransaction::drain_shared_memory(
    const std::function<void(std::uint64_t)>& stored) {
  Result<DrainStats> drained = DrainStats{};
  if (req_.leave_running) {
    drained = drain_shared(*writer_, shared_drains_, stored);
  } else {  // the job is stopped: nothing writes them
    std::vector<DrainRegion> shared;
    for (const SharedDrain& d : shared_drains_) shared.push_back(d.stored);
    drained = drain_regions(*writer_, shared, nullptr, {}, stored);
  }
  if (!drained)
    return std::move(drained)
        .context("storing the shared device memory of job " + std::to_string(req_.pid))
        .error();
  if (req_.leave_running) rep_.cow_waits += drained->wanted;
  return ok();
}

Status CheckpointTransaction::drain_members(const std::function<void(std::uint64_t)>& stored,
                                            std::uint64_t& done_before) {
  JobSessions& s = ports_.sessions;
  for (std::size_t i = 0; i < members_.size(); ++i) {  // each behind its table
    const CowTable* table = i < tables_.size() && tables_[i] ? &*tables_[i] : nullptr;
    TakeCopy take = [&s, i](std::uint32_t index, std::uint64_t size) {
      return s.cow_take(i, index, size);
    };
    auto drained =
        drain_regions(*writer_, to_store_[i], table, take, stored, [&s, i] { return s.gone(i); });
    if (!drained)
      return std::move(drained)
          .context("storing the device memory of process " + std::to_string(s.pid(i)))
          .error();
    for (const DrainRegion& d : to_store_[i]) done_before += d.region.size;
    rep_.cow_copies += drained->took_copy;
    rep_.cow_waits += drained->wanted;
  }
  return ok();
}

Status CheckpointTransaction::drain() {
  JobSessions& s = ports_.sessions;
  ports_.pause("draining");
  ports_.progress("storing " + std::to_string(rep_.dirty_bytes >> 20) + " MiB of device memory" +
                  (req_.device_only ? std::string(" (no CRIU: a pre-copy round)")
                   : plan_.external ? std::string(" before the runtime's CRIU dumps the rest")
                                    : " and the CRIU image"));
  t_store_ = Clock::now();
  std::uint64_t total = 0, done_before = 0;
  for (const auto& list : to_store_)
    for (const DrainRegion& d : list) total += d.region.size;
  for (const SharedDrain& d : shared_drains_) total += d.stored.region.size;
  auto last = Clock::time_point{};
  auto stored = [&](std::uint64_t done) {  // done: within the current call
    auto now = Clock::now();
    done += done_before;
    if (done < total && now - last < std::chrono::milliseconds(100)) return;
    last = now;
    ports_.progress(bytes_progress("storing", done, total));
  };
  Status drained = ok();
  if (!shared_drains_.empty()) {  // first: members may be waiting for them
    drained = drain_shared_memory(stored);
    for (const SharedDrain& d : shared_drains_) done_before += d.stored.region.size;
  }
  if (drained) drained = drain_members(stored, done_before);
  for (std::size_t i = 0; i < members_.size(); ++i) {
    if (!req_.leave_running || !s.is_open(i)) continue;
    if (i == 0)
      if (auto after_cut = s.touch_order(i))
        touch_order_.insert(touch_order_.begin(), after_cut->begin(), after_cut->end());
    (void)s.cow_end(i);
    (void)s.close(i);
  }
  GCR_TRY(std::move(drained));
  return store_images();
}

Status CheckpointTransaction::store_images() {
  auto tw = Clock::now();
  GCR_TRY_ASSIGN(bool waited, ports_.dumper.finish());  // it runs on (-R)
  if (waited) record_phase(rep_, "dump_write", tw);
  GCR_TRY_ASSIGN(Dumper::Stored pages, ports_.dumper.store(*writer_));
  rep_.host_pages_dma_frozen = pages.dma;
  rep_.host_pages_saved = pages.saved;
  rep_.host_pages_from_parent = pages.from_parent;
  rep_.host_pages_from_process = pages.from_process;
  rep_.host_tracked_tasks = pages.tracked_tasks;
  if (!touch_order_.empty() && !plan_.job)
    writer_->set_meta("touch_order", format_touch_order(touch_order_));
  if (!views_meta_.empty()) writer_->set_meta("shared_views", views_meta_);
  record_phase(rep_, "store", t_store_);
  return ok();
}

// --- commit and finish ---------------------------------------------------------------------------

Status CheckpointTransaction::commit_manifest() {
  record_phase(rep_, "total", t_begin_);
  for (const auto& [k, v] : rep_.times_ns)
    writer_->set_meta("timing." + k + "_ns", std::to_string(v));
  GCR_TRY_ASSIGN(store::CommitInfo info, writer_->commit(req_.tag));
  rep_.id = info.id.hex();
  rep_.stats = info.stats;
  committed_ = std::move(info);
  if (req_.link && !req_.tag)
    tx_.on_undo("the job's part", [this] { (void)ports_.store.remove(committed_->id); });
  // Note [CRIU run by someone else]: device memory without a CRIU image of its process is of no
  // use, should the runtime's dump fail.
  if (plan_.external && !req_.device_only)
    tx_.on_undo("the checkpoint committed before the runtime's dump",
                [this] { (void)ports_.store.remove(committed_->id); });
  return ok();
}

Status CheckpointTransaction::finish() {
  const std::string id = committed_->id.hex();
  if (plan_.external) {
    if (req_.device_only)
      rep_.kept_running = true;  // it has had its memory back since the release
    else
      GCR_TRY(finish_external());
    if (rep_.kept_running) ports_.record_lineage(id);
    return ok();
  }
  // Note [gcrd owns lineage]: only now is this checkpoint a parent the next one may name.
  if (req_.leave_running) ports_.record_lineage(id);
  if (end_after_commit_ && req_.hold) GCR_TRY(finish_hold());
  if (end_after_commit_) {
    // The checkpoint is safe: end the process, as `criu dump` without -R would have: the whole
    // tree CRIU dumped (and left stopped), workers too; every tree of a job.
    ports_.dumper.end_trees();
    ports_.keepers.done();
  }
  return ok();
}

// Note [CRIU run by someone else] (checkpoint.h): the device memory is committed; the runtime's
// CRIU dumps now. What it did with the tasks afterwards gcrd sees: gone, or running on.
Status CheckpointTransaction::finish_external() {
  auto t = Clock::now();
  GCR_TRY_ASSIGN(bool kept_running, ports_.dumper.dump_after_commit(committed_->id.hex()));
  record_phase(rep_, "dump", t);
  tx_.forget_undo("the checkpoint committed before the runtime's dump");
  if (!kept_running) {
    ports_.keepers.done();
    tx_.forget_undo("the memory parked");
    record_phase(rep_, "stall", t);
    return ok();
  }
  rep_.kept_running = true;
  ports_.progress("the runtime left process " + std::to_string(req_.pid) +
                  " running: giving it its device memory back");
  if (!give_all_back())
    return Error{Errc::io_error, "process " + std::to_string(req_.pid) +
                                     " ran on after its dump but did not take its device memory "
                                     "back; its keeper ends it"};
  ports_.keepers.done();
  tx_.forget_undo("the memory parked");
  return ok();
}

// Note [Migration] (cli/cmd_migrate.cpp): the stopped process waits for the destination.
Status CheckpointTransaction::finish_hold() {
  const std::string id = committed_->id.hex();
  ports_.progress("checkpoint " + id.substr(0, 12) + " committed; process " +
                  std::to_string(req_.pid) + " waits, stopped, for the migration to finish");
  bool handed = false;
  auto heard = [&](const std::string& word) {
    if (word != "commit") return;
    handed = true;
    ports_.keepers.handed_over();
  };
  bool end = req_.hold(id, heard);
  if (!end && handed) ports_.keepers.kept();
  if (!end)
    return Error{Errc::io_error, "the migration of process " + std::to_string(req_.pid) +
                                     " did not finish (checkpoint " + id.substr(0, 12) + " stays)"};
  return ok();
}

}  // namespace gcr::gcrd
