// The fake world of fake_world.h.
#include "fake_world.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "fake_fds.h"

namespace gcr::gcrd::test {
namespace {

constexpr std::uint64_t kRegionBytes = 64 * 1024;

Error injected(const std::string& name) {
  return Error{Errc::io_error, "injected: " + name};
}

// Device memory as a memfd (a parked region, or a process's copy).
class MemfdMemory final : public HeldMemory {
 public:
  MemfdMemory(UniqueFd fd, std::uint64_t size) : fd_(std::move(fd)), size_(size) {}
  std::uint64_t size() const override { return size_; }
  Status read(std::uint64_t offset, std::span<std::byte> out) const override {
    if (::pread(fd_.get(), out.data(), out.size(), static_cast<off_t>(offset)) !=
        static_cast<ssize_t>(out.size()))
      return errno_error("reading fake device memory");
    return ok();
  }

 private:
  UniqueFd fd_;
  std::uint64_t size_;
};

class FakeSessions final : public JobSessions {
 public:
  explicit FakeSessions(World& w) : w_(w) {}
  std::size_t size() const override { return w_.procs.size(); }
  pid_t pid(std::size_t m) const override { return w_.procs[m].pid; }

  Status cut(std::chrono::milliseconds, const Progress&) override {
    if (w_.call("cut")) return injected("cut");
    return ok();
  }
  void end_cut() override { w_.calls.push_back("end_cut"); }
  Status quiesce(std::chrono::milliseconds) override {
    if (w_.call("quiesce")) return injected("quiesce");  // the others are resumed
    for (FakeProcess& p : w_.procs) {
      if (!p.session_open) return Error{Errc::internal, "quiesce without a session"};
      p.gate_open = false;
    }
    return ok();
  }
  Status resume(std::size_t m) override {
    FakeProcess& p = w_.procs[m];
    if (w_.call("resume " + std::to_string(p.pid))) return injected("resume");
    if (!p.session_open) return Error{Errc::internal, "resume without a session"};
    if (p.memory_parked) return Error{Errc::invalid_argument, "resume needs an unparked process"};
    p.gate_open = true;
    if (p.cow_active && p.writes_after_resume) write_region0(m);
    return ok();
  }
  Result<std::vector<control::ParkedRegion>> park(std::size_t m) override {
    FakeProcess& p = w_.procs[m];
    if (w_.call("park " + std::to_string(p.pid))) return injected("park");
    if (!p.session_open || p.gate_open)
      return Error{Errc::invalid_argument, "park needs a quiesced process and a session"};
    std::vector<control::ParkedRegion> out;
    for (const FakeRegion& r : p.regions)
      out.push_back({{r.address, r.bytes.size(), 0, r.dirty ? control::kRegionDirty : 0u},
                     dup_fd(r.memfd.get())});
    p.memory_parked = true;
    return out;
  }
  Status unpark(std::size_t m, const std::vector<control::ParkedRegion>& regions) override {
    FakeProcess& p = w_.procs[m];
    if (w_.call("unpark " + std::to_string(p.pid))) return injected("unpark");
    if (!p.session_open || !p.memory_parked)
      return Error{Errc::invalid_argument, "unpark needs a parked process and a session"};
    GCR_TRY(check_same_memory(p, regions));
    p.memory_parked = false;
    return ok();
  }
  Result<std::vector<std::uint64_t>> touch_order(std::size_t m) override {
    if (w_.call("touch_order " + std::to_string(pid(m)))) return injected("touch_order");
    return std::vector<std::uint64_t>{w_.procs[m].regions.back().address};
  }
  Result<control::HostDmaRanges> host_dma(std::size_t) override {
    return Error{Errc::unsupported, "no pinned host memory in this world"};
  }
  Status new_epoch(std::size_t m, const std::string&) override {
    if (w_.call("new_epoch " + std::to_string(pid(m)))) return injected("new_epoch");
    return ok();
  }
  Status close(std::size_t m) override {
    FakeProcess& p = w_.procs[m];
    bool fail = w_.call("close " + std::to_string(p.pid));
    end_session(p);
    if (fail) return injected("close");
    return ok();
  }
  Status reopen(std::size_t m) override {
    FakeProcess& p = w_.procs[m];
    if (w_.call("reopen " + std::to_string(p.pid))) return injected("reopen");
    if (!p.alive || p.stopped) return Error{Errc::timeout, "the process does not answer"};
    p.session_open = true;
    return ok();
  }
  bool is_open(std::size_t m) const override { return w_.procs[m].session_open; }
  bool gone(std::size_t m) const override { return !w_.procs[m].alive; }
  bool give_back(std::size_t m, const std::vector<control::ParkedRegion>& regions) override {
    FakeProcess& p = w_.procs[m];
    if (w_.call("give_back " + std::to_string(p.pid))) return false;
    if (!p.alive || p.stopped || p.session_open || !p.memory_parked) return false;
    if (!check_same_memory(p, regions)) return false;
    p.memory_parked = false;
    p.gate_open = true;
    return true;
  }
  Result<bool> ensure_running(std::size_t m) override {
    if (w_.call("ensure_running " + std::to_string(pid(m)))) return injected("ensure_running");
    return false;
  }
  Status cow_begin(std::size_t m, int table_fd, std::uint32_t entries) override {
    FakeProcess& p = w_.procs[m];
    if (w_.call("cow_begin " + std::to_string(p.pid))) return injected("cow_begin");
    if (!p.session_open) return Error{Errc::internal, "cow_begin without a session"};
    tables_[m] = {dup_fd(table_fd), entries};
    p.cow_active = true;
    return ok();
  }
  Result<std::unique_ptr<HeldMemory>> cow_take(std::size_t m, std::uint32_t index,
                                               std::uint64_t size) override {
    if (w_.call("cow_take " + std::to_string(pid(m)))) return injected("cow_take");
    auto it = copies_.find({m, index});
    if (it == copies_.end()) return Error{Errc::invalid_argument, "no copy of that entry"};
    UniqueFd fd = std::move(it->second);
    copies_.erase(it);
    return std::unique_ptr<HeldMemory>(std::make_unique<MemfdMemory>(std::move(fd), size));
  }
  Status cow_end(std::size_t m) override {
    w_.calls.push_back("cow_end " + std::to_string(pid(m)));
    w_.procs[m].cow_active = false;
    return ok();
  }

 private:
  // A session never leaves the process quiesced (docs/protocol.md §5); copy-on-write ends with it.
  static void end_session(FakeProcess& p) {
    if (p.session_open && !p.gate_open && !p.memory_parked) p.gate_open = true;
    p.session_open = false;
    p.cow_active = false;
  }
  // Every region back, each from its own allocation (a view: the shared allocation's file).
  static Status check_same_memory(const FakeProcess& p,
                                  const std::vector<control::ParkedRegion>& regions) {
    if (regions.size() != p.regions.size())
      return Error{Errc::invalid_argument, "every parked region must come back"};
    for (std::size_t i = 0; i < regions.size(); ++i)
      if (regions[i].region.address != p.regions[i].address ||
          inode_of(regions[i].fd.get()) != inode_of(p.regions[i].memfd.get()))
        return Error{Errc::invalid_argument,
                     "region " + std::to_string(i) + " came back with other memory"};
    return ok();
  }
  // Soft copy-on-write, the process's side: copy region 0 before writing it.
  void write_region0(std::size_t m) {
    FakeProcess& p = w_.procs[m];
    auto& [fd, count] = tables_[m];
    std::size_t bytes = cow::table_bytes(count);
    void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (map == MAP_FAILED) return;
    auto* header = static_cast<cow::TableHeader*>(map);
    for (std::uint32_t i = 0; i < count; ++i) {
      cow::Entry& e = cow::entries(header)[i];
      if (e.address != p.regions[0].address) continue;
      std::uint32_t s = cow::kPending;
      if (!e.state.compare_exchange_strong(s, cow::kCopying)) break;
      std::vector<std::byte> now(p.regions[0].bytes.size());
      (void)!::pread(p.regions[0].memfd.get(), now.data(), now.size(), 0);
      copies_[{m, i}] = memfd_with(now);
      e.state.store(cow::kCopied);
    }
    ::munmap(map, bytes);
    (void)!::pwrite(p.regions[0].memfd.get(), p.written.data(), p.written.size(), 0);
  }

  World& w_;
  std::map<std::size_t, std::pair<UniqueFd, std::uint32_t>> tables_;
  std::map<std::pair<std::size_t, std::uint32_t>, UniqueFd> copies_;
};

class FakeKeepers final : public Keepers {
 public:
  explicit FakeKeepers(World& w) : w_(w) {}
  Status start(pid_t pid, const std::vector<control::ParkedRegion>&,
               const std::vector<pid_t>& stopped_roots) override {
    if (w_.call("keeper " + std::to_string(pid))) return injected("keeper");
    proc(pid).keeper = FakeProcess::Keeper::holding;
    continues_[pid] = !stopped_roots.empty();
    return ok();
  }
  void done() override {
    w_.calls.push_back("keepers done");
    for (FakeProcess& p : w_.procs)
      if (p.keeper == FakeProcess::Keeper::holding) p.keeper = FakeProcess::Keeper::done;
  }
  // Each keeper's pipe closes without done: it gives its process the memory back (Note [Parked
  // memory outlives gcrd]) once the process answers; with stopped roots it continues them first.
  void abandon() override {
    w_.calls.push_back("keepers abandoned");
    for (FakeProcess& p : w_.procs) {
      if (p.keeper != FakeProcess::Keeper::holding) continue;
      if (p.stopped && continues_[p.pid]) p.stopped = false;
      if (p.alive && !p.stopped && p.memory_parked) {
        p.memory_parked = false;
        p.gate_open = true;
      }
      p.keeper = FakeProcess::Keeper::gave_back;
    }
  }
  void handed_over() override { w_.calls.push_back("keepers handed_over"); }
  void kept() override { w_.calls.push_back("keepers kept"); }

 private:
  FakeProcess& proc(pid_t pid) {
    for (FakeProcess& p : w_.procs)
      if (p.pid == pid) return p;
    return w_.procs[0];
  }
  World& w_;
  std::map<pid_t, bool> continues_;
};

class FakeDumper final : public Dumper {
 public:
  explicit FakeDumper(World& w) : w_(w) {}
  std::string images_in() const override { return w_.config.external ? "runtime" : "disk"; }
  Result<bool> prepare(const PinnedHostMemory&, const Progress&) override {
    if (external()) return false;
    if (w_.call("criu_start")) return injected("criu_start");
    started_ = true;
    return true;
  }
  void cancel() override {
    if (started_) w_.calls.push_back("criu_cancel");
    started_ = false;
  }
  bool wants_pinned() const override { return false; }
  Status pinned_known(const PinnedHostMemory*) override { return ok(); }
  Result<DumpOutcome> dump(const PinnedHostMemory&, std::uint64_t*) override {
    if (external()) return Error{Errc::internal, "a runtime's CRIU does not dump here"};
    started_ = false;
    if (w_.call("criu_dump")) return injected("criu_dump");
    for (const FakeProcess& p : w_.procs) {
      if (p.session_open) return Error{Errc::internal, "CRIU dumps a process holding a session"};
      if (!p.memory_parked) return Error{Errc::internal, "CRIU dumps a process not parked"};
    }
    const bool stop = !w_.config.leave_running || w_.config.several_trees;
    for (FakeProcess& p : w_.procs) p.stopped = stop;
    return DumpOutcome{stop};
  }
  void continue_trees() override {
    w_.calls.push_back("continue_trees");
    for (FakeProcess& p : w_.procs) p.stopped = false;
  }
  Result<bool> finish() override { return false; }
  Result<Stored> store(store::CheckpointWriter& writer) override {
    if (external()) return Stored{};
    if (w_.call("criu_store")) return injected("criu_store");
    const std::string image = "inventory";
    GCR_TRY(writer.add_blob("criu/inventory.img",
                            {reinterpret_cast<const std::byte*>(image.data()), image.size()}));
    return Stored{};
  }
  void end_trees() override {
    w_.calls.push_back("end_trees");
    for (FakeProcess& p : w_.procs) p.alive = false;
  }
  Result<bool> dump_after_commit(const std::string&) override {
    if (w_.call("runtime_dump")) return injected("runtime_dump");
    if (w_.config.runtime_keeps_running) return true;
    for (FakeProcess& p : w_.procs) p.alive = false;
    return false;
  }

 private:
  bool external() const { return w_.config.external || w_.config.device_only; }
  World& w_;
  bool started_ = false;
};

class FakeDevice final : public DeviceHolder {
 public:
  explicit FakeDevice(World& w) : w_(w) {}
  Result<std::unique_ptr<HeldMemory>> import(int fd, std::uint64_t size) override {
    if (w_.call("import")) return injected("import");
    return std::unique_ptr<HeldMemory>(std::make_unique<MemfdMemory>(dup_fd(fd), size));
  }

 private:
  World& w_;
};

// The real store's writer, with failures injected by name.
class FailingWriter final : public store::CheckpointWriter {
 public:
  FailingWriter(World& w, std::unique_ptr<store::CheckpointWriter> real)
      : w_(w), real_(std::move(real)) {}
  const store::CheckpointId& id() const override { return real_->id(); }
  Status add_region(std::uint64_t address, std::span<const std::byte> data, std::uint32_t device,
                    bool dirty) override {
    if (w_.call("store_region")) return injected("store_region");
    return real_->add_region(address, data, device, dirty);
  }
  Status add_region_streamed(std::uint64_t address, std::uint64_t size, std::uint32_t device,
                             bool dirty, const RegionFill& fill) override {
    if (w_.call("store_region")) return injected("store_region");
    return real_->add_region_streamed(address, size, device, dirty, fill);
  }
  Status add_region_from_parent(std::uint64_t address, std::uint64_t size,
                                std::uint32_t device) override {
    if (w_.call("store_from_parent")) return injected("store_from_parent");
    return real_->add_region_from_parent(address, size, device);
  }
  void set_region_owner(const std::string& owner) override { real_->set_region_owner(owner); }
  Status add_file(const std::string& relative, std::uint32_t mode,
                  const std::filesystem::path& source) override {
    return real_->add_file(relative, mode, source);
  }
  Status add_blob(const std::string& name, std::span<const std::byte> data) override {
    return real_->add_blob(name, data);
  }
  void set_meta(const std::string& key, const std::string& value) override {
    real_->set_meta(key, value);
  }
  Result<store::CommitInfo> commit(std::optional<std::string> tag) override {
    if (w_.call("store_commit")) return injected("store_commit");
    return real_->commit(std::move(tag));
  }

 private:
  World& w_;
  std::unique_ptr<store::CheckpointWriter> real_;
};

class FailingStore final : public CheckpointStore {
 public:
  FailingStore(World& w, store::Store& real) : w_(w), real_(real) {}
  Result<std::unique_ptr<store::CheckpointWriter>> begin(
      const std::map<std::string, std::string>& meta,
      const std::optional<store::CheckpointId>& parent) override {
    if (w_.call("store_begin")) return injected("store_begin");
    GCR_TRY_ASSIGN(auto writer, real_.begin_checkpoint(meta, parent));
    return std::unique_ptr<store::CheckpointWriter>(
        std::make_unique<FailingWriter>(w_, std::move(writer)));
  }
  std::optional<store::Manifest> manifest(const store::CheckpointId& id) override {
    auto m = real_.read_manifest(id);
    if (!m) return std::nullopt;
    return std::move(m).value();
  }
  Status remove(const store::CheckpointId& id) override {
    w_.calls.push_back("store_remove");
    return real_.remove(id);
  }

 private:
  World& w_;
  store::Store& real_;
};

std::vector<std::byte> seeded(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> out(n);
  std::mt19937_64 rng(seed);
  for (std::byte& b : out) b = std::byte(static_cast<std::uint8_t>(rng()));
  return out;
}

}  // namespace

World::World(Config c) : config(c) {
  char tmpl[] = "/tmp/gcr-transaction-test-XXXXXX";
  root = ::mkdtemp(tmpl);
  for (int m = 0; m < config.members; ++m) {
    FakeProcess p;
    p.pid = 101 + m;
    for (int r = 0; r < 2; ++r) {
      FakeRegion region;
      region.address = 0x7f0000000000ull + static_cast<std::uint64_t>(m) * 0x10000000ull +
                       static_cast<std::uint64_t>(r) * 0x200000ull;
      region.bytes = seeded(kRegionBytes, 1000 * m + r);
      if (config.share && m == 1 && r == 1) {  // a view of member 0's region 1
        region.bytes = procs[0].regions[1].bytes;
        region.memfd = dup_fd(procs[0].regions[1].memfd.get());
      } else {
        region.memfd = memfd_with(region.bytes);
      }
      p.regions.push_back(std::move(region));
    }
    procs.push_back(std::move(p));
  }
  request.pid = procs[0].pid;
  if (config.several_trees)
    for (int m = 1; m < config.members; ++m) request.job_pids.push_back(procs[m].pid);
  request.leave_running = config.leave_running;
  request.device_only = config.device_only;
  if (config.hold)
    request.hold = [this](const std::string&,
                          const std::function<void(const std::string&)>& heard) {
      calls.push_back("hold");
      heard("commit");
      return *config.hold;
    };
  store::StoreOptions o;
  o.root = root / "store";
  own_store_ = store::Store::open(o, true).value();
  store_ = own_store_.get();
}

World::~World() {
  tx_.reset();
  std::error_code ec;
  std::filesystem::remove_all(root, ec);
}

bool World::call(const std::string& name) {
  calls.push_back(name);
  if (auto s = slow.find(name); s != slow.end()) now += s->second;
  return fail.erase(name) > 0;
}

CheckpointTransaction& World::build(store::Store& shared_store) {
  store_ = &shared_store;
  ports_store_ = std::make_unique<FailingStore>(*this, shared_store);
  sessions_ = std::make_unique<FakeSessions>(*this);
  keepers_ = std::make_unique<FakeKeepers>(*this);
  dumper_ = std::make_unique<FakeDumper>(*this);
  device_ = std::make_unique<FakeDevice>(*this);
  CheckpointPlan plan;
  for (const FakeProcess& p : procs) {
    plan.owners.push_back(p.pid == procs[0].pid ? "" : "pid:" + std::to_string(p.pid));
    plan.registered.push_back(false);
    if (config.several_trees || p.pid == procs[0].pid) plan.roots.push_back(p.pid);
  }
  plan.several_trees = config.several_trees;
  plan.job = procs.size() > 1;
  plan.external = config.external || config.device_only;
  if (config.share)
    plan.shared.push_back({{{0, procs[0].regions[1].address}, {1, procs[1].regions[1].address}}});
  plan.parent = parent;
  plan.meta = {{"pid", std::to_string(procs[0].pid)}, {"owner_uid", "0"}, {"kind", "gcr"}};
  if (plan.job) plan.meta["job_members"] = encode_job_members(plan.owners);
  CheckpointPorts ports{*ports_store_,
                        *sessions_,
                        *keepers_,
                        *dumper_,
                        *device_,
                        [this](const std::string& id) { calls.push_back("lineage " + id); },
                        [](const std::string&) {}};
  ports.limit = limit;
  ports.now = [this] { return now; };
  tx_ = std::make_unique<CheckpointTransaction>(request, std::move(plan), ports);
  return *tx_;
}

Status World::checkpoint() {
  CheckpointTransaction& tx = build(*store_);
  GCR_TRY(tx.prepare());
  return tx.commit();
}

std::size_t World::committed() const {
  auto list = store_->list();
  return list ? list->size() : 0;
}

std::string World::failed_state(std::size_t committed_before) const {
  std::string out;
  for (const FakeProcess& p : procs) {
    std::string who = "process " + std::to_string(p.pid) + ": ";
    if (!p.alive) out += who + "ended; ";
    if (p.stopped) out += who + "left stopped; ";
    if (p.memory_parked) out += who + "left without its memory; ";
    if (!p.gate_open) out += who + "left quiesced; ";
    if (p.cow_active) out += who + "copy-on-write left on; ";
    if (p.keeper == FakeProcess::Keeper::holding) out += who + "a keeper still holds it; ";
  }
  if (committed() != committed_before)
    out += "a checkpoint was committed (" + std::to_string(committed()) + " against " +
           std::to_string(committed_before) + ")";
  return out;
}

Status FakeParticipant::prepare() {
  log_.push_back(name_ + " prepare");
  if (fail_prepare) return Error{Errc::io_error, name_ + " cannot prepare"};
  return ok();
}

Status FakeParticipant::commit() {
  log_.push_back(name_ + " commit");
  if (fail_commit) return Error{Errc::io_error, name_ + " cannot commit"};
  return ok();
}

}  // namespace gcr::gcrd::test
