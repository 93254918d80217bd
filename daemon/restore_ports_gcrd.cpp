// gcrd's restore ports (restore_ports_gcrd.h).
#include "restore_ports_gcrd.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <string>

#include "gcr/control.h"
#include "gcr/process_tree.h"
#include "host_pages.h"
#include "job.h"
#include "keeper.h"
#include "loader.h"
#include "staged.h"
#include "stream_relay.h"
#include "work_dir.h"

namespace gcr::gcrd {

namespace {

// A region's allocation, mapped in gcrd.
class GpuRegion final : public DeviceRegion {
 public:
  explicit GpuRegion(MappedAllocation a) : allocation(std::move(a)) {}
  int device() const override { return allocation.device(); }
  Result<UniqueFd> export_fd() const override { return allocation.export_fd(); }

  MappedAllocation allocation;
};

class LoaderLoad final : public DeviceLoad {
 public:
  explicit LoaderLoad(std::unique_ptr<Loader> loader) : loader_(std::move(loader)) {}
  void resumed() override { loader_->resumed(); }
  bool failed() const override { return loader_->failed(); }
  Status wait() override { return loader_->wait(); }
  bool wait_for(std::chrono::milliseconds timeout) override { return loader_->wait_for(timeout); }
  std::uint64_t loaded_bytes() const override { return loader_->loaded_bytes(); }
  std::uint64_t wanted_regions() const override { return loader_->wanted_regions(); }
  std::uint64_t store_read_bytes() const override { return loader_->store_read_bytes(); }
  std::uint64_t shared_bytes() const override { return loader_->shared_bytes(); }

 private:
  std::unique_ptr<Loader> loader_;
};

class WorkImageDir final : public ImageDir {
 public:
  explicit WorkImageDir(WorkDir dir) : dir_(std::move(dir)) {}
  const std::filesystem::path& path() const override { return dir_.path(); }

 private:
  WorkDir dir_;
};

class CriuLazyPages final : public LazyHostMemory {
 public:
  bool running() const override { return pages.running(); }
  Status wait() override { return pages.wait(); }
  std::optional<Status> poll() override { return pages.poll(); }

  criu::LazyPages pages;
};

class HostPagesServer final : public HostPageServer {
 public:
  explicit HostPagesServer(std::unique_ptr<HostPages> pages) : pages_(std::move(pages)) {}
  const store::CheckpointReader::LeftOut& left_out() const override { return pages_->left_out(); }
  Result<UniqueFd> serve(std::unique_ptr<store::CheckpointReader> reader) override {
    return pages_->serve(std::move(reader));
  }
  int server_fd() const override { return pages_->server_fd(); }
  void on_failure(std::function<void()> end_tasks) override {
    pages_->on_failure(std::move(end_tasks));
  }
  std::optional<Error> failure() const override { return pages_->failure(); }
  void join() override { pages_->join(); }
  Stats stats() const override {
    const HostPages::Stats& s = pages_->stats();
    return {s.requests, s.bytes, s.read_ns, s.send_ns};
  }

 private:
  std::unique_ptr<HostPages> pages_;
};

class KeeperGuard final : public RestoreGuard {
 public:
  explicit KeeperGuard(Keeper keeper) : keeper_(std::move(keeper)) {}
  Status restored(pid_t pid) override { return keeper_.restored(pid); }
  Status restoring_in(pid_t pid) override { return keeper_.restoring_in(pid); }
  Status restoring_in_namespace(pid_t unshare_pid,
                                const std::filesystem::path& ready_file) override {
    return keeper_.restoring_in_namespace(unshare_pid, ready_file);
  }
  void done() override { keeper_.done(); }

 private:
  Keeper keeper_;
};

class ClientSession final : public RestoredSession {
 public:
  explicit ClientSession(control::Client client) : client_(std::move(client)) {}
  Status cow_begin(int table_fd, std::uint32_t entries) override {
    return client_.cow_begin(table_fd, entries);
  }
  Status unpark(const std::vector<control::ParkedRegion>& regions) override {
    return client_.unpark(regions);
  }
  Status resume() override { return client_.resume(); }
  Status cow_end() override { return client_.cow_end(); }
  Status close() override { return client_.close(); }

 private:
  control::Client client_;
};

}  // namespace

// --- GpuDevices ----------------------------------------------------------------------------------

Status GpuDevices::open() {
  GCR_TRY_ASSIGN(gpu_, Gpu::get());
  return ok();
}

Result<std::unique_ptr<DeviceRegion>> GpuDevices::allocate(std::uint64_t size, int device) {
  GCR_TRY_ASSIGN(MappedAllocation a, MappedAllocation::create(size, device));
  return std::unique_ptr<DeviceRegion>(std::make_unique<GpuRegion>(std::move(a)));
}

bool GpuDevices::is_staged(const store::Manifest& m, const store::ObjectEntry& object, int device) {
  return gcr::gcrd::is_staged(m, object, device);
}

std::unique_ptr<DeviceRegion> GpuDevices::take_staged(const store::Manifest& m,
                                                      const store::ObjectEntry& object,
                                                      int device) {
  std::optional<MappedAllocation> staged = gcr::gcrd::take_staged(m, object, device);
  if (!staged) return nullptr;
  return std::make_unique<GpuRegion>(std::move(*staged));
}

void GpuDevices::drop_staged() {
  gcr::gcrd::drop_staged();
}

Result<std::unique_ptr<DeviceLoad>> GpuDevices::load(
    std::unique_ptr<store::CheckpointReader> reader, std::vector<LoadItem> items,
    const CowTable* table, std::vector<LoadWatch> watches, bool behind_restore) {
  std::vector<Loader::Item> loader_items;
  for (const LoadItem& item : items) {
    auto* region = dynamic_cast<GpuRegion*>(item.destination);
    if (!region) return Error{Errc::internal, "a region to load that gcrd did not allocate"};
    loader_items.push_back({item.object, &region->allocation});
  }
  std::vector<Loader::Watch> loader_watches;
  for (LoadWatch& w : watches) loader_watches.push_back({w.table, std::move(w.entry_of)});
  GCR_TRY_ASSIGN(std::unique_ptr<Loader> loader,
                 Loader::start(std::move(reader), std::move(loader_items), table,
                               std::move(loader_watches), behind_restore));
  return std::unique_ptr<DeviceLoad>(std::make_unique<LoaderLoad>(std::move(loader)));
}

// --- GcrCriuRestorer -----------------------------------------------------------------------------

bool GcrCriuRestorer::lazy_pages_available() {
  return criu::lazy_pages_available(tools_);
}

std::map<std::string, std::string> GcrCriuRestorer::driver_env() {
  return gcr::gcrd::driver_env();
}

Result<std::unique_ptr<ImageDir>> GcrCriuRestorer::image_dir() {
  GCR_TRY_ASSIGN(WorkDir w, WorkDir::create("restore"));
  return std::unique_ptr<ImageDir>(std::make_unique<WorkImageDir>(std::move(w)));
}

Result<std::unique_ptr<HostPageServer>> GcrCriuRestorer::plan_host_pages(
    store::CheckpointReader& reader) {
  GCR_TRY_ASSIGN(std::unique_ptr<HostPages> pages, HostPages::plan(reader));
  return std::unique_ptr<HostPageServer>(std::make_unique<HostPagesServer>(std::move(pages)));
}

bool GcrCriuRestorer::may_reopen_as_pipe(int fd) {
  return gcr::gcrd::may_reopen_as_pipe(fd);
}

Result<UniqueFd> GcrCriuRestorer::relay_into(int target) {
  return gcr::gcrd::relay_into(target);
}

// CRIU hands its lazy-pages daemon to the LazyPages the options name (left as it was when the
// restore fails): a new one, the caller's once the restore succeeded.
Status GcrCriuRestorer::restore(const criu::RestoreOptions& options,
                                std::unique_ptr<LazyHostMemory>* lazy) {
  if (!lazy) return criu::restore(tools_, options);
  auto daemon = std::make_unique<CriuLazyPages>();
  criu::RestoreOptions with_daemon = options;
  with_daemon.lazy_pages = &daemon->pages;
  GCR_TRY(criu::restore(tools_, with_daemon));
  *lazy = std::move(daemon);
  return ok();
}

// --- KeeperProcesses, LocalProcesses -------------------------------------------------------------

Result<std::unique_ptr<RestoreGuard>> KeeperProcesses::start(const std::filesystem::path& pidfile,
                                                             int host_pages_fd) {
  GCR_TRY_ASSIGN(Keeper keeper, Keeper::start_restore(pidfile, host_pages_fd));
  return std::unique_ptr<RestoreGuard>(std::make_unique<KeeperGuard>(std::move(keeper)));
}

bool LocalProcesses::pid_in_use(pid_t pid) {
  return ::kill(pid, 0) == 0 || errno == EPERM;
}

bool LocalProcesses::privileged() {
  return geteuid() == 0;
}

std::vector<pid_t> LocalProcesses::tree_pids(pid_t root) {
  return criu::tree_pids(root);
}

pid_t LocalProcesses::innermost_pid(pid_t pid) {
  return gcr::gcrd::innermost_pid(pid);
}

Result<std::unique_ptr<RestoredSession>> LocalProcesses::connect(pid_t pid) {
  GCR_TRY_ASSIGN(control::Client client, control::Client::connect(pid, std::chrono::seconds(10)));
  return std::unique_ptr<RestoredSession>(std::make_unique<ClientSession>(std::move(client)));
}

void LocalProcesses::kill_tree(pid_t root) {
  criu::kill_tree(root);
}

void LocalProcesses::kill(pid_t pid) {
  ::kill(pid, SIGKILL);
}

// A restore that failed returns only once the process it killed no longer runs (and its pid is
// free again soon after): up to 5 s.
void LocalProcesses::wait_gone(pid_t pid) {
  for (int i = 0; i < 500; ++i) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string stat;
    if (!std::getline(in, stat)) return;
    auto close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z') return;
    usleep(10'000);
  }
}

}  // namespace gcr::gcrd
