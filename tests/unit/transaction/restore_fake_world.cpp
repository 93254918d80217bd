// The fake world of restore_fake_world.h.
#include "restore_fake_world.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>

#include "fake_fds.h"

#include "gcr/manifest.h"
#include "job.h"

namespace gcr::gcrd::test {
namespace {

constexpr std::uint64_t kRegionBytes = 64 * 1024;
constexpr pid_t kRoot = 1000;        // the checkpoint's pid
constexpr pid_t kMember = 1001;      // the other member of a job of one tree
constexpr pid_t kOtherTree = 2000;   // the root of a job's other tree
constexpr pid_t kNamespace = 5000;   // a new PID namespace: gcrd sees pid P as P - kRoot + this
constexpr pid_t kRuntimePid = 7000;  // what a container runtime restores, as gcrd sees it
constexpr pid_t kCriu = 9000;        // the CRIUs, as they are spawned

std::vector<std::byte> seeded(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> out(n);
  std::mt19937_64 rng(seed);
  for (std::byte& b : out) b = std::byte(static_cast<std::uint8_t>(rng()));
  return out;
}

Error injected(const std::string& name) {
  return Error{Errc::io_error, "injected: " + name};
}

// What a staged region holds: the same address, size, device and chunks.
std::string content_key(const store::Manifest& m, const store::ObjectEntry& o, int device) {
  std::string key =
      std::to_string(o.address) + ":" + std::to_string(o.size) + ":" + std::to_string(device);
  for (std::uint64_t i = o.first_chunk; i < o.first_chunk + o.chunk_count && i < m.chunks.size();
       ++i)
    key += ":" + m.chunks[i].id.hex();
  return key;
}

// --- the store -----------------------------------------------------------------------------------

class FailingReader final : public store::CheckpointReader {
 public:
  FailingReader(RestoreWorld& w, std::unique_ptr<store::CheckpointReader> real)
      : w_(w), real_(std::move(real)) {}
  const store::Manifest& manifest() const override { return real_->manifest(); }
  Status read(const store::ObjectEntry& object, std::uint64_t offset,
              std::span<std::byte> out) override {
    return real_->read(object, offset, out);
  }
  Status materialize_files(const std::filesystem::path& dir, const LeftOut& left_out) override {
    if (w_.call("materialize")) return injected("materialize");
    return real_->materialize_files(dir, left_out);
  }

 private:
  RestoreWorld& w_;
  std::unique_ptr<store::CheckpointReader> real_;
};

class FakeStore final : public RestoreStore {
 public:
  explicit FakeStore(RestoreWorld& w) : w_(w) {}
  Result<store::CheckpointId> resolve(const std::string& name) override {
    if (w_.call("resolve")) return injected("resolve");
    return w_.store().resolve(name);
  }
  Result<std::unique_ptr<store::CheckpointReader>> open(const store::CheckpointId& id,
                                                        bool arriving) override {
    if (w_.call("open_checkpoint")) return injected("open_checkpoint");
    GCR_TRY_ASSIGN(auto reader, w_.store().open_checkpoint(id, arriving));
    return std::unique_ptr<store::CheckpointReader>(
        std::make_unique<FailingReader>(w_, std::move(reader)));
  }

 private:
  RestoreWorld& w_;
};

// --- the GPUs ------------------------------------------------------------------------------------

class FakeRegion final : public DeviceRegion {
 public:
  FakeRegion(RestoreWorld& w, UniqueFd memfd, int device)
      : w_(w), memfd_(std::move(memfd)), device_(device) {
    ++w_.allocations;
  }
  ~FakeRegion() override {
    if (w_.loads > 0) w_.violations.push_back("device memory freed while a load writes it");
    --w_.allocations;
    w_.calls.push_back("free");
  }
  int device() const override { return device_; }
  Result<UniqueFd> export_fd() const override {
    if (w_.call("export")) return injected("export");
    return dup_fd(memfd_.get());
  }
  int fd() const { return memfd_.get(); }

 private:
  RestoreWorld& w_;
  UniqueFd memfd_;
  int device_;
};

// Loads every item at once when waited for; its first wait_for says "not yet", so that the
// restore looks at CRIU's lazy-pages daemon meanwhile.
class FakeLoad final : public DeviceLoad {
 public:
  FakeLoad(RestoreWorld& w, std::unique_ptr<store::CheckpointReader> reader,
           std::vector<RestoreDevices::LoadItem> items)
      : w_(w), reader_(std::move(reader)), items_(std::move(items)) {
    ++w_.loads;
  }
  ~FakeLoad() override {
    --w_.loads;
    w_.calls.push_back("load_stopped");
  }
  void resumed() override {}
  bool failed() const override {
    if (!w_.call("load_failed")) return false;
    result_ = injected("load_failed");  // a chunk found corrupt before CRIU runs
    return true;
  }
  Status wait() override {
    if (!result_) result_ = w_.call("load_wait") ? Status(injected("load_wait")) : load_all();
    return *result_;
  }
  bool wait_for(std::chrono::milliseconds) override {
    if (!result_ && waited_++ == 0) return false;
    (void)wait();
    return true;
  }
  std::uint64_t loaded_bytes() const override { return 0; }
  std::uint64_t wanted_regions() const override { return 0; }
  std::uint64_t store_read_bytes() const override { return 0; }
  std::uint64_t shared_bytes() const override { return 0; }

 private:
  Status load_all() {
    for (const RestoreDevices::LoadItem& item : items_) {
      std::vector<std::byte> bytes(item.object.size);
      GCR_TRY(reader_->read(item.object, 0, bytes));
      int fd = static_cast<FakeRegion*>(item.destination)->fd();
      if (::pwrite(fd, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size()))
        return errno_error("loading fake device memory");
    }
    return ok();
  }
  RestoreWorld& w_;
  std::unique_ptr<store::CheckpointReader> reader_;
  std::vector<RestoreDevices::LoadItem> items_;
  mutable std::optional<Status> result_;
  int waited_ = 0;
};

class FakeDevices final : public RestoreDevices {
 public:
  explicit FakeDevices(RestoreWorld& w) : w_(w) {}
  Status open() override {
    if (w_.call("gpu_open")) return injected("gpu_open");
    return ok();
  }
  int count() const override { return 2; }
  std::uint64_t free_bytes(int) override { return 1ull << 30; }
  Status use(int) override {
    if (w_.call("use")) return injected("use");
    return ok();
  }
  Result<std::unique_ptr<DeviceRegion>> allocate(std::uint64_t size, int device) override {
    if (w_.call("allocate")) return injected("allocate");
    std::vector<std::byte> zeros(size);
    return std::unique_ptr<DeviceRegion>(
        std::make_unique<FakeRegion>(w_, memfd_with(zeros), device));
  }
  bool is_staged(const store::Manifest& m, const store::ObjectEntry& object, int device) override {
    for (const FakeStaged& s : w_.staged)
      if (s.key == content_key(m, object, device)) return true;
    return false;
  }
  std::unique_ptr<DeviceRegion> take_staged(const store::Manifest& m,
                                            const store::ObjectEntry& object, int device) override {
    for (auto it = w_.staged.begin(); it != w_.staged.end(); ++it)
      if (it->key == content_key(m, object, device)) {
        w_.calls.push_back("take_staged");
        auto region = std::make_unique<FakeRegion>(w_, std::move(it->memfd), device);
        w_.staged.erase(it);
        return region;
      }
    return nullptr;
  }
  void drop_staged() override {
    w_.calls.push_back("drop_staged");
    w_.staged.clear();
  }
  Result<std::unique_ptr<DeviceLoad>> load(std::unique_ptr<store::CheckpointReader> reader,
                                           std::vector<LoadItem> items, const CowTable*,
                                           std::vector<LoadWatch>, bool) override {
    if (w_.call("load_start")) return injected("load_start");
    return std::unique_ptr<DeviceLoad>(
        std::make_unique<FakeLoad>(w_, std::move(reader), std::move(items)));
  }

 private:
  RestoreWorld& w_;
};

// --- CRIU, its lazy-pages daemon, gcrd's server of host memory -----------------------------------

class FakeImageDir final : public ImageDir {
 public:
  FakeImageDir(RestoreWorld& w, std::filesystem::path path) : w_(w), path_(std::move(path)) {
    std::filesystem::create_directories(path_);
    ++w_.image_dirs;
  }
  ~FakeImageDir() override {
    if (w_.lazy_daemons > 0)
      w_.violations.push_back("CRIU's images removed while its lazy-pages daemon reads them");
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    --w_.image_dirs;
    w_.calls.push_back("images_removed");
  }
  const std::filesystem::path& path() const override { return path_; }

 private:
  RestoreWorld& w_;
  std::filesystem::path path_;
};

class FakeLazy final : public LazyHostMemory {
 public:
  explicit FakeLazy(RestoreWorld& w) : w_(w) { ++w_.lazy_daemons; }
  ~FakeLazy() override {
    if (!running_) return;
    if (w_.host_servers > 0)
      w_.violations.push_back("the lazy-pages daemon reaped before gcrd's server hung up");
    end();
    w_.calls.push_back("lazy_killed");
  }
  bool running() const override { return running_; }
  Status wait() override {
    if (!running_) return ok();
    end();
    if (w_.call("lazy_wait")) return injected("lazy_wait");
    return ok();
  }
  std::optional<Status> poll() override {
    if (!running_) return ok();
    if (!w_.call("lazy_poll")) return std::nullopt;
    end();
    return Status(injected("lazy_poll"));
  }

 private:
  void end() {
    running_ = false;
    --w_.lazy_daemons;
  }
  RestoreWorld& w_;
  bool running_ = true;
};

class FakeHostPages final : public HostPageServer {
 public:
  explicit FakeHostPages(RestoreWorld& w) : w_(w) { ++w_.host_servers; }
  ~FakeHostPages() override {
    --w_.host_servers;
    w_.calls.push_back("host_stopped");
  }
  const store::CheckpointReader::LeftOut& left_out() const override { return left_out_; }
  Result<UniqueFd> serve(std::unique_ptr<store::CheckpointReader>) override {
    if (w_.call("host_serve")) return injected("host_serve");
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
      return errno_error("socketpair");
    server_.reset(sv[0]);
    return UniqueFd(sv[1]);
  }
  int server_fd() const override { return server_.get(); }
  void on_failure(std::function<void()> end_tasks) override { end_tasks_ = std::move(end_tasks); }
  std::optional<Error> failure() const override { return failure_; }
  void join() override { w_.calls.push_back("host_join"); }
  Stats stats() const override { return {}; }
  // A page it cannot read: it ends the tasks, then hangs up.
  void fail_page() {
    failure_ = Error{Errc::corrupt_image, "host memory: a chunk of pages-1.img is damaged"};
    if (end_tasks_) end_tasks_();
  }

 private:
  RestoreWorld& w_;
  store::CheckpointReader::LeftOut left_out_;
  UniqueFd server_;
  std::function<void()> end_tasks_;
  std::optional<Error> failure_;
};

class FakeCriu final : public CriuRestorer {
 public:
  explicit FakeCriu(RestoreWorld& w) : w_(w) {}
  bool lazy_pages_available() override { return w_.config.lazy; }
  std::map<std::string, std::string> driver_env() override { return {}; }
  Result<std::unique_ptr<ImageDir>> image_dir() override {
    if (w_.call("image_dir")) return injected("image_dir");
    return std::unique_ptr<ImageDir>(std::make_unique<FakeImageDir>(w_, w_.root / "images"));
  }
  Result<std::unique_ptr<HostPageServer>> plan_host_pages(store::CheckpointReader&) override {
    if (w_.call("host_plan")) return injected("host_plan");
    auto server = std::make_unique<FakeHostPages>(w_);
    host_ = server.get();
    return std::unique_ptr<HostPageServer>(std::move(server));
  }
  bool may_reopen_as_pipe(int) override { return false; }
  Result<UniqueFd> relay_into(int) override {
    if (w_.call("relay")) return injected("relay");
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return errno_error("pipe");
    ::close(p[0]);
    return UniqueFd(p[1]);
  }
  Status restore(const criu::RestoreOptions& o, std::unique_ptr<LazyHostMemory>* lazy) override;

 private:
  void check_before(const criu::RestoreOptions& o, pid_t root);
  RestoreWorld& w_;
  FakeHostPages* host_ = nullptr;
  pid_t spawned_ = kCriu;
};

// What must hold when CRIU starts: the images are there, every region has its memory, a keeper
// guards what it restores, and the pid it restores is free.
void FakeCriu::check_before(const criu::RestoreOptions& o, pid_t root) {
  if (!std::filesystem::exists(o.image_dir / "inventory.img"))
    w_.violations.push_back("CRIU ran without its images");
  std::size_t stored = 0;
  for (const FakeCheckpointRegion& r : w_.regions) stored += r.stored_address == 0 ? 1 : 0;
  if (static_cast<std::size_t>(w_.allocations) != stored)
    w_.violations.push_back("CRIU ran before every region had its memory");
  bool guarded = false;
  for (const auto& [k, state] : w_.keepers) guarded |= state == "holding";
  if (!guarded && (stored > 0 || w_.host_servers > 0))
    w_.violations.push_back("CRIU ran with no keeper guarding the restore");
  if (!o.new_pid_namespace && w_.config.pid_in_use && root == kRoot)
    w_.violations.push_back("CRIU restored a pid in use");
}

Status FakeCriu::restore(const criu::RestoreOptions& o, std::unique_ptr<LazyHostMemory>* lazy) {
  const bool first = o.image_dir.parent_path().filename() != "trees";
  const pid_t root = first ? kRoot : static_cast<pid_t>(std::stoi(o.image_dir.filename()));
  check_before(o, root);
  const pid_t criu = spawned_++;
  if (o.on_spawned) o.on_spawned(criu);
  if (o.before_criu) o.before_criu();
  if (w_.call("criu_restore")) return injected("criu_restore");
  if (o.lazy_pages_socket >= 0 && host_ && w_.call("serve_page")) {
    host_->fail_page();  // the daemon gives up: CRIU fails
    return Error{Errc::io_error, "criu restore failed (see restore.log)"};
  }
  std::vector<std::pair<pid_t, std::string>> tasks{
      {root, first ? "" : "pid:" + std::to_string(root)}};
  if (first && w_.config.members > 1 && !w_.config.several_trees)
    tasks.push_back({kMember, "pid:" + std::to_string(kMember)});
  const bool stop_copy = w_.config.stop_copy;  // the driver's own restore: nothing parked
  for (const auto& [ns_pid, owner] : tasks) {
    FakeRestored p;
    p.ns_pid = ns_pid;
    p.pid = o.new_pid_namespace ? ns_pid - kRoot + kNamespace : ns_pid;
    p.root = o.new_pid_namespace ? kNamespace : root;
    p.criu = criu;
    p.owner = owner;
    p.parked = !stop_copy;
    p.running = stop_copy;
    w_.procs.push_back(std::move(p));
  }
  *o.restored_pid = w_.procs[w_.procs.size() - tasks.size()].pid;
  if (lazy) *lazy = std::make_unique<FakeLazy>(w_);
  return ok();
}

// --- keepers -------------------------------------------------------------------------------------

class FakeGuard final : public RestoreGuard {
 public:
  FakeGuard(RestoreWorld& w, int index) : w_(w), index_(index) {}
  // As if gcrd had died: a process it guards that is still parked is ended.
  ~FakeGuard() override {
    if (w_.keepers[index_] != "holding") return;
    w_.keepers[index_] = "dropped";
    w_.calls.push_back("keeper_dropped");
    for (FakeRestored& p : w_.procs)
      if (pid_ && p.root == pid_ && p.alive && p.parked) p.alive = false;
  }
  Status restored(pid_t pid) override {
    if (w_.call("keeper_restored")) return injected("keeper_restored");
    pid_ = pid;
    return ok();
  }
  Status restoring_in(pid_t) override {
    if (w_.call("keeper_restoring_in")) return injected("keeper_restoring_in");
    return ok();
  }
  Status restoring_in_namespace(pid_t, const std::filesystem::path&) override {
    if (w_.call("keeper_namespace")) return injected("keeper_namespace");
    return ok();
  }
  void done() override {
    if (w_.keepers[index_] != "holding") return;
    w_.keepers[index_] = "done";
    w_.calls.push_back("keeper_done");
  }

 private:
  RestoreWorld& w_;
  int index_;
  pid_t pid_ = 0;
};

class FakeKeepers final : public RestoreKeepers {
 public:
  explicit FakeKeepers(RestoreWorld& w) : w_(w) {}
  Result<std::unique_ptr<RestoreGuard>> start(const std::filesystem::path&, int) override {
    if (w_.call("keeper_start")) return injected("keeper_start");
    const int index = static_cast<int>(w_.keepers.size());
    w_.keepers[index] = "holding";
    return std::unique_ptr<RestoreGuard>(std::make_unique<FakeGuard>(w_, index));
  }

 private:
  RestoreWorld& w_;
};

// --- the restored processes and their sessions ---------------------------------------------------

class FakeSession final : public RestoredSession {
 public:
  FakeSession(RestoreWorld& w, pid_t pid) : w_(w), pid_(pid) { w_.proc(pid)->session = true; }
  ~FakeSession() override {
    FakeRestored* p = w_.proc(pid_);
    if (!p->session) return;
    w_.calls.push_back("drop " + std::to_string(pid_));
    end(*p);
  }
  Status cow_begin(int, std::uint32_t) override {
    if (w_.call("cow_begin " + std::to_string(pid_))) return injected("cow_begin");
    w_.proc(pid_)->table = true;
    return ok();
  }
  Status unpark(const std::vector<control::ParkedRegion>& regions) override;
  Status resume() override {
    if (w_.call("resume " + std::to_string(pid_))) return injected("resume");
    FakeRestored& p = *w_.proc(pid_);
    if (p.parked) return Error{Errc::invalid_argument, "resume needs an unparked process"};
    run(p);
    return ok();
  }
  Status cow_end() override {
    if (w_.call("cow_end " + std::to_string(pid_))) return injected("cow_end");
    FakeRestored& p = *w_.proc(pid_);
    if (!complete(p)) p.ran_on_missing = true;  // its waiters are released
    p.table = false;
    return ok();
  }
  Status close() override {
    const bool fail = w_.call("close " + std::to_string(pid_));
    end(*w_.proc(pid_));  // a session that fails to close is dropped all the same
    if (fail) return injected("close");
    return ok();
  }

 private:
  // Every region of its has the checkpoint's bytes: nothing left to load.
  bool complete(const FakeRestored& p) const {
    for (const FakeCheckpointRegion& r : w_.regions)
      if (r.owner == p.owner && !w_.has_checkpoint_bytes(p, r.address)) return false;
    return true;
  }
  void run(FakeRestored& p) {
    p.running = true;
    if (!p.table && !complete(p)) p.ran_on_missing = true;
  }
  // The session ends: the interposer ends a process whose loads are pending (op_cow_end), and
  // lets one that has its memory run.
  void end(FakeRestored& p) {
    p.session = false;
    if (p.table && !complete(p)) {
      if (p.alive) w_.calls.push_back("interposer ended " + std::to_string(p.pid));
      p.alive = false;
      return;
    }
    p.table = false;
    if (!p.parked && !p.running) run(p);
  }
  RestoreWorld& w_;
  pid_t pid_;
};

// Every region of the member back, each at its address; a view of a shared allocation with the
// file of the region it is stored as.
Status FakeSession::unpark(const std::vector<control::ParkedRegion>& regions) {
  if (w_.call("unpark " + std::to_string(pid_))) return injected("unpark");
  FakeRestored& p = *w_.proc(pid_);
  if (!p.parked) return Error{Errc::invalid_argument, "unpark needs a parked process"};
  std::size_t expected = 0;
  for (const FakeCheckpointRegion& r : w_.regions) expected += r.owner == p.owner ? 1 : 0;
  if (regions.size() != expected)
    return Error{Errc::invalid_argument, "every region of " + p.owner + " must come back"};
  for (const control::ParkedRegion& r : regions) p.memory[r.region.address] = dup_fd(r.fd.get());
  p.parked = false;
  return ok();
}

class FakeProcesses final : public RestoredProcesses {
 public:
  explicit FakeProcesses(RestoreWorld& w) : w_(w) {}
  bool pid_in_use(pid_t pid) override {
    if (w_.config.pid_in_use && pid == kRoot) return true;
    const FakeRestored* p = w_.proc(pid);
    return p && p->alive;
  }
  bool privileged() override { return w_.config.pid_in_use; }
  std::vector<pid_t> tree_pids(pid_t root) override {
    std::vector<pid_t> out;
    for (const FakeRestored& p : w_.procs)
      if (p.root == root && p.alive) out.push_back(p.pid);
    return out;
  }
  pid_t innermost_pid(pid_t pid) override {
    const FakeRestored* p = w_.proc(pid);
    return p ? p->ns_pid : pid;
  }
  Result<std::unique_ptr<RestoredSession>> connect(pid_t pid) override {
    if (w_.call("connect " + std::to_string(pid))) return injected("connect");
    const FakeRestored* p = w_.proc(pid);
    if (!p || !p->alive) return Error{Errc::not_found, "no process " + std::to_string(pid)};
    if (p->session) return Error{Errc::busy, "another session holds it"};
    return std::unique_ptr<RestoredSession>(std::make_unique<FakeSession>(w_, pid));
  }
  void kill_tree(pid_t root) override {
    w_.calls.push_back("kill_tree " + std::to_string(root));
    for (FakeRestored& p : w_.procs)
      if (p.root == root || p.pid == root || p.criu == root) p.alive = false;
  }
  void kill(pid_t pid) override {
    w_.calls.push_back("kill " + std::to_string(pid));
    if (FakeRestored* p = w_.proc(pid)) p->alive = false;
  }
  void wait_gone(pid_t pid) override {
    w_.calls.push_back("wait_gone " + std::to_string(pid));
    if (const FakeRestored* p = w_.proc(pid); p && p->alive)
      w_.violations.push_back("waited for process " + std::to_string(pid) + ", which runs on");
  }

 private:
  RestoreWorld& w_;
};

}  // namespace

// --- the world -----------------------------------------------------------------------------------

RestoreWorld::RestoreWorld(RestoreConfig c) : config(c) {
  // In memory where there is a tmpfs: a store's commit syncs, and nothing here tests durability
  // (this test's hundreds of worlds took 18 s on /tmp while the disk was busy, 1.2 s in memory).
  const bool shm = ::access("/dev/shm", W_OK) == 0;
  std::string tmpl = shm ? "/dev/shm/gcr-restore-test-XXXXXX" : "/tmp/gcr-restore-test-XXXXXX";
  root = ::mkdtemp(tmpl.data());
  store::StoreOptions o;
  o.root = root / "store";
  store_ = store::Store::open(o, true).value();
  write_checkpoint();
  if (config.staged) stage();
  request.name = config.arriving ? checkpoint.hex() : checkpoint.hex().substr(0, 12);
  request.arriving = config.arriving;
  request.eager = config.eager;
  if (!config.external)
    request.check_images = [this](const std::filesystem::path&) -> Status {
      if (call("check_images")) return injected("check_images");
      return ok();
    };
  if (config.relay) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) == 0) {
      ::close(p[0]);
      request.inherit.push_back({"pipe:[77]", UniqueFd(p[1])});
    }
  }
  if (config.external)
    request.external_criu = [this]() -> Result<pid_t> {
      if (call("runtime_restore")) return injected("runtime_restore");
      FakeRestored p;
      p.pid = p.root = kRuntimePid;
      p.ns_pid = kRoot;
      procs.push_back(std::move(p));
      return kRuntimePid;
    };
}

RestoreWorld::~RestoreWorld() {
  std::error_code ec;
  std::filesystem::remove_all(root, ec);
}

// A checkpoint of pid 1000 (and of its job's other member, or tree): two regions each, a view of
// a shared allocation where the members share one, CRIU's images (or none: a container's).
void RestoreWorld::write_checkpoint() {
  std::map<std::string, std::string> meta{
      {"pid", std::to_string(kRoot)}, {"owner_uid", "0"}, {"kind", "gcr"}};
  if (config.stop_copy) meta["kind"] = "stop-copy";
  if (config.external) meta["criu_images"] = "external";
  const pid_t other = config.several_trees ? kOtherTree : kMember;
  std::vector<std::string> owners{""};
  if (config.members > 1) owners.push_back("pid:" + std::to_string(other));
  if (config.members > 1) meta["job_members"] = encode_job_members(owners);
  if (config.several_trees) {
    meta["job_trees"] = std::to_string(kRoot) + "\n" + std::to_string(kOtherTree) + "\n";
    meta["job_sockets"] = "11 12 stream\n";
  }
  for (std::size_t m = 0; m < owners.size() && !config.stop_copy; ++m)
    for (std::uint64_t r = 0; r < 2; ++r) {
      FakeCheckpointRegion region{owners[m],
                                  0x7f0000000000ull + m * 0x10000000ull + r * 0x200000ull,
                                  seeded(kRegionBytes, 1000 * m + r), "", 0};
      if (m == 1 && r == 1 && !config.several_trees) {  // a view of member 0's region 1
        region.bytes = regions[1].bytes;
        region.stored_owner = regions[1].owner;
        region.stored_address = regions[1].address;
      }
      regions.push_back(std::move(region));
    }
  std::vector<SharedView> views;
  for (const FakeCheckpointRegion& r : regions)
    if (r.stored_address) views.push_back({r.owner, r.address, r.stored_owner, r.stored_address});
  if (!views.empty()) meta["shared_views"] = encode_shared_views(views);
  if (config.members == 1 && !config.stop_copy) {  // Note [First-touch order]: region 1 first
    char order[32];
    std::snprintf(order, sizeof order, "%llx", static_cast<unsigned long long>(regions[1].address));
    meta["touch_order"] = order;
  }
  auto writer = store_->begin_checkpoint(meta, std::nullopt).value();
  for (const FakeCheckpointRegion& r : regions) {
    if (r.stored_address) continue;
    writer->set_region_owner(r.owner);
    (void)writer->add_region(r.address, r.bytes, 0, true);
  }
  const std::filesystem::path image = root / "inventory.img";
  std::ofstream(image) << "inventory";
  if (!config.external) (void)writer->add_file("inventory.img", 0600, image);
  if (config.several_trees)
    (void)writer->add_file(tree_images_dir(kOtherTree) + "/inventory.img", 0600, image);
  checkpoint = writer->commit(std::nullopt).value().id;
  manifest_bytes_ = store::encode_manifest(store_->read_manifest(checkpoint).value());
}

// Region 0 staged as it is in the checkpoint; region 1 as it was in an earlier round.
void RestoreWorld::stage() {
  const store::Manifest m = store_->read_manifest(checkpoint).value();
  for (const store::ObjectEntry& o : m.objects) {
    if (o.kind != store::ObjectKind::device_region) continue;
    const bool current = o.address == regions[0].address;
    std::vector<std::byte> bytes = current ? regions[0].bytes : seeded(o.size, 99);
    staged.push_back(
        {content_key(m, o, 0) + (current ? "" : ":an earlier round"), memfd_with(bytes)});
  }
  staged_before = staged.size();
}

bool RestoreWorld::call(const std::string& name) {
  calls.push_back(name);
  const int k = ++seen_[name];
  const std::string nth = k == 1 ? name : name + "@" + std::to_string(k);
  if (auto s = slow.find(nth); s != slow.end()) now += s->second;
  return fail.erase(nth) > 0;
}

FakeRestored* RestoreWorld::proc(pid_t pid) {
  for (FakeRestored& p : procs)
    if (p.pid == pid) return &p;
  return nullptr;
}

Status RestoreWorld::restore() {
  store_port_ = std::make_unique<FakeStore>(*this);
  devices_ = std::make_unique<FakeDevices>(*this);
  criu_ = std::make_unique<FakeCriu>(*this);
  keepers_ = std::make_unique<FakeKeepers>(*this);
  processes_ = std::make_unique<FakeProcesses>(*this);
  RestorePorts ports{
      *store_port_,
      *devices_,
      *criu_,
      *keepers_,
      *processes_,
      [this](pid_t pid, const std::string&) { calls.push_back("lineage " + std::to_string(pid)); },
      [](const std::string&) {}};
  ports.host_pages_from_store = config.host_from_store;
  ports.limit = limit;
  ports.now = [this] {
    if (past_deadline_at && ++clock_reads >= past_deadline_at)
      now = Transaction::Clock::time_point{} + limit + std::chrono::hours(1);
    return now;
  };
  Status s = ok();
  {
    RestoreTransaction tx(request, std::move(ports));
    tx.transaction().set_observer(
        [this](const std::string& phase) { calls.push_back("phase " + phase); });
    Result<RestoreReport> r = tx.run();
    journal = tx.transaction().journal();
    if (r)
      report = std::move(r).value();
    else
      s = std::move(r).error();
  }
  return s;
}

bool RestoreWorld::has_checkpoint_bytes(const FakeRestored& p, std::uint64_t address) const {
  auto it = p.memory.find(address);
  if (it == p.memory.end()) return false;
  for (const FakeCheckpointRegion& r : regions)
    if (r.owner == p.owner && r.address == address)
      return bytes_of(it->second.get(), r.bytes.size()) == r.bytes;
  return false;
}

std::string RestoreWorld::checkpoint_unchanged() const {
  auto m = store_->read_manifest(checkpoint);
  if (!m) return "its manifest cannot be read: " + m.error().message;
  if (store::encode_manifest(*m) != manifest_bytes_) return "its manifest changed";
  auto reader = store_->open_checkpoint(checkpoint);
  if (!reader) return "it cannot be opened: " + reader.error().message;
  for (const store::ObjectEntry& o : m->objects) {
    if (o.kind != store::ObjectKind::device_region) continue;
    std::vector<std::byte> bytes(o.size);
    if (!(*reader)->read(o, 0, bytes)) return "a region cannot be read";
    bool found = false;
    for (const FakeCheckpointRegion& r : regions)
      found |= r.owner == o.name && r.address == o.address && r.bytes == bytes;
    if (!found) return "region " + std::to_string(o.address) + " changed";
  }
  auto list = store_->list();
  if (!list || list->size() != 1) return "the store holds another checkpoint";
  return "";
}

namespace {
// What the world holds that a restore, failed or not, must have let go of.
std::string held(const RestoreWorld& w) {
  std::string out;
  if (w.allocations) out += std::to_string(w.allocations) + " allocations left; ";
  if (w.loads) out += "a load left running; ";
  if (w.image_dirs) out += "CRIU's images left; ";
  if (w.lazy_daemons) out += "CRIU's lazy-pages daemon left running; ";
  if (w.host_servers) out += "gcrd's server of host memory left; ";
  for (const auto& [k, state] : w.keepers)
    if (state == "holding") out += "keeper " + std::to_string(k) + " left holding; ";
  for (const std::string& v : w.violations) out += v + "; ";
  return out;
}
}  // namespace

std::string RestoreWorld::failed_state() const {
  std::string out = held(*this);
  for (const FakeRestored& p : procs) {
    std::string who = "process " + std::to_string(p.pid) + ": ";
    if (p.alive) out += who + "left alive; ";
    if (p.ran_on_missing) out += who + "ran on bytes it did not get; ";
    if (p.session) out += who + "its session left open; ";
    if (host_memory_filling(p.pid)) out += who + "left filling; ";
  }
  // Note [Restore phases]: what the restore took from the stage goes with it; the rest is dropped
  // once it has taken what it could, else stays.
  std::size_t took = 0;
  bool dropped = false;
  for (const std::string& c : calls) {
    took += c == "take_staged" ? 1 : 0;
    dropped |= c == "drop_staged";
  }
  if (staged.size() != (dropped ? 0 : staged_before - took))
    out += std::to_string(staged.size()) + " regions left staged; ";
  out += checkpoint_unchanged();
  return out;
}

std::string RestoreWorld::restored_state() const {
  std::string out = held(*this);
  for (const auto& [k, state] : keepers)
    if (state != "done") out += "keeper " + std::to_string(k) + " " + state + "; ";
  for (const FakeRestored& p : procs) {
    std::string who = "process " + std::to_string(p.pid) + ": ";
    if (!p.alive) out += who + "ended; ";
    if (p.parked || !p.running) out += who + "does not run; ";
    if (p.ran_on_missing) out += who + "ran on bytes it did not get; ";
    if (p.session || p.table) out += who + "its session or load table left; ";
    if (host_memory_filling(p.pid)) out += who + "left filling; ";
    for (const FakeCheckpointRegion& r : regions)
      if (r.owner == p.owner && !has_checkpoint_bytes(p, r.address))
        out += who + "region " + std::to_string(r.address) + " lacks the checkpoint's bytes; ";
  }
  // A view of a shared allocation maps the very memory of the region it is stored as.
  for (const FakeCheckpointRegion& r : regions) {
    if (!r.stored_address) continue;
    std::uint64_t view = 0, stored = 0;
    for (const FakeRestored& p : procs) {
      if (p.owner == r.owner && p.memory.contains(r.address))
        view = inode_of(p.memory.at(r.address).get());
      if (p.owner == r.stored_owner && p.memory.contains(r.stored_address))
        stored = inode_of(p.memory.at(r.stored_address).get());
    }
    if (!view || view != stored) out += "a view of a shared allocation maps other memory; ";
  }
  if (!staged.empty()) out += "memory left staged; ";
  const pid_t pid = report ? report->pid : 0;
  if (std::find(calls.begin(), calls.end(), "lineage " + std::to_string(pid)) == calls.end())
    out += "no lineage recorded for " + std::to_string(pid) + "; ";
  out += checkpoint_unchanged();
  return out;
}

}  // namespace gcr::gcrd::test
