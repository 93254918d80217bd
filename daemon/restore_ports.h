// What a restore transaction (restore_txn.h) does to the world, behind narrow interfaces: the
// store it reads, the GPUs its device memory is reserved and loaded on, CRIU (and gcrd's server of
// host memory beside it), the keepers that guard a restored process, and the restored processes
// themselves (their control sessions). gcrd's implementations (restore_ports_gcrd.h) call the real
// thing; tests/unit/transaction fakes them, so that the phases and their undos run as an
// unprivileged user in milliseconds.
//
// The objects these ports hand out (a region's memory, a load, a session, a keeper, CRIU's
// image directory and lazy-pages daemon, the server of host memory) each release what they hold
// when destroyed: the transaction owns them, and its members' order is the order of their release
// (Note [Restore phases]).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gcr/control.h"
#include "gcr/criu.h"
#include "gcr/result.h"
#include "gcr/store.h"
#include "gcr/unique_fd.h"
#include "shared_table.h"

namespace gcr::gcrd {

// The store, as a restore reads it.
class RestoreStore {
 public:
  virtual ~RestoreStore() = default;
  virtual Result<store::CheckpointId> resolve(const std::string& name) = 0;
  // A reader of its own (the restore's, the loader's, the server of host memory's); `arriving`:
  // chunks not yet in the store are waited for (RestoreRequest::arriving).
  virtual Result<std::unique_ptr<store::CheckpointReader>> open(const store::CheckpointId& id,
                                                                bool arriving) = 0;
};

// A local or staged store::Store.
class StoreToRestore final : public RestoreStore {
 public:
  explicit StoreToRestore(store::Store& store) : store_(store) {}
  Result<store::CheckpointId> resolve(const std::string& name) override {
    return store_.resolve(name);
  }
  Result<std::unique_ptr<store::CheckpointReader>> open(const store::CheckpointId& id,
                                                        bool arriving) override {
    return store_.open_checkpoint(id, arriving);
  }

 private:
  store::Store& store_;
};

// One region's device memory, allocated on its GPU for the restore or taken from what a migration
// staged (Note [Staged restore] in staged.h); freed when destroyed (what a process imported stays
// its own).
class DeviceRegion {
 public:
  virtual ~DeviceRegion() = default;
  virtual int device() const = 0;
  // A POSIX fd of the allocation, for the process to map.
  virtual Result<UniqueFd> export_fd() const = 0;
};

// Regions being loaded from the store (loader.h); destroyed, it stops and joins.
class DeviceLoad {
 public:
  virtual ~DeviceLoad() = default;
  // CRIU is done (or the restore failed): from now on the load is the critical path.
  virtual void resumed() = 0;
  // Non-blocking: whether it has failed already.
  virtual bool failed() const = 0;
  // Until every region is in, or the first error; idempotent.
  virtual Status wait() = 0;
  // Waits at most `timeout`; whether it has ended.
  virtual bool wait_for(std::chrono::milliseconds timeout) = 0;
  virtual std::uint64_t loaded_bytes() const = 0;
  virtual std::uint64_t wanted_regions() const = 0;
  virtual std::uint64_t store_read_bytes() const = 0;
  virtual std::uint64_t shared_bytes() const = 0;
};

// The GPUs of this machine, as a restore reserves and loads device memory on them (device.h,
// staged.h, loader.h).
class RestoreDevices {
 public:
  virtual ~RestoreDevices() = default;
  // The driver, initialized once per gcrd (Gpu::get).
  virtual Status open() = 0;
  virtual int count() const = 0;
  virtual std::uint64_t free_bytes(int device) = 0;
  // Makes `device` current on this thread.
  virtual Status use(int device) = 0;
  virtual Result<std::unique_ptr<DeviceRegion>> allocate(std::uint64_t size, int device) = 0;
  // Note [Staged restore]: whether `object` of `m` is staged on `device`; take_staged takes it
  // out of the staged set (null: nothing staged matches); drop_staged frees the rest.
  virtual bool is_staged(const store::Manifest& m, const store::ObjectEntry& object,
                         int device) = 0;
  virtual std::unique_ptr<DeviceRegion> take_staged(const store::Manifest& m,
                                                    const store::ObjectEntry& object,
                                                    int device) = 0;
  virtual void drop_staged() = 0;

  struct LoadItem {
    store::ObjectEntry object;
    DeviceRegion* destination;  // one of this port's, alive until the load is destroyed
  };
  // A table some items are waited for in (Loader::Watch): item i is entry entry_of[i] (-1: none).
  struct LoadWatch {
    const CowTable* table = nullptr;
    std::vector<std::int64_t> entry_of;
  };
  // Starts loading at once (Loader::start): `table` (may be null) has one entry per item; it and
  // the watches' tables outlive the load; `behind_restore`: Note [Loading behind the restore].
  virtual Result<std::unique_ptr<DeviceLoad>> load(std::unique_ptr<store::CheckpointReader> reader,
                                                   std::vector<LoadItem> items,
                                                   const CowTable* table,
                                                   std::vector<LoadWatch> watches,
                                                   bool behind_restore) = 0;
};

// A private directory for CRIU's images (work_dir.h), removed when destroyed.
class ImageDir {
 public:
  virtual ~ImageDir() = default;
  virtual const std::filesystem::path& path() const = 0;
};

// CRIU's lazy-pages daemon of a restore (Note [Host memory restored lazily] in gcr/criu.h):
// killed and reaped when destroyed, unless wait() or poll() saw it end.
class LazyHostMemory {
 public:
  virtual ~LazyHostMemory() = default;
  virtual bool running() const = 0;
  // Until every page is in; an error quoting its log otherwise.
  virtual Status wait() = 0;
  // The same without waiting: nothing while the daemon runs.
  virtual std::optional<Status> poll() = 0;
};

// gcrd's server of the restored tasks' host memory (Note [Host memory from the store] in
// host_pages.h); when destroyed it hangs up and joins its thread.
class HostPageServer {
 public:
  virtual ~HostPageServer() = default;
  virtual const store::CheckpointReader::LeftOut& left_out() const = 0;
  // Serves on one end of a new socket pair through `reader`; the daemon's end.
  virtual Result<UniqueFd> serve(std::unique_ptr<store::CheckpointReader> reader) = 0;
  virtual int server_fd() const = 0;
  // Called from the server's thread before it hangs up on a page it cannot read.
  virtual void on_failure(std::function<void()> end_tasks) = 0;
  virtual std::optional<Error> failure() const = 0;
  virtual void join() = 0;
  struct Stats {
    std::uint64_t requests = 0, bytes = 0;
    std::int64_t read_ns = 0, send_ns = 0;
  };
  virtual Stats stats() const = 0;  // after join()
};

// gcr's own CRIU, as a restore runs it (gcr/criu.h), and what goes with it.
class CriuRestorer {
 public:
  virtual ~CriuRestorer() = default;
  virtual bool lazy_pages_available() = 0;
  // The environment CRIU's gcr plugin needs to reach gcrd's driver (work_dir.h driver_env).
  virtual std::map<std::string, std::string> driver_env() = 0;
  virtual Result<std::unique_ptr<ImageDir>> image_dir() = 0;
  // The lazily restorable host memory of the checkpoint `reader` reads, which gcrd can serve
  // (HostPages::plan); an error says why it cannot (the images then hold the pages).
  virtual Result<std::unique_ptr<HostPageServer>> plan_host_pages(
      store::CheckpointReader& reader) = 0;
  // Note [Streams reconnected by rule] (stream_relay.h).
  virtual bool may_reopen_as_pipe(int fd) = 0;
  virtual Result<UniqueFd> relay_into(int target) = 0;
  // criu::restore. `lazy` (may be null): the restore uses lazy pages, and on success *lazy is
  // its daemon; options.lazy_pages is the port's to set.
  virtual Status restore(const criu::RestoreOptions& options,
                         std::unique_ptr<LazyHostMemory>* lazy) = 0;
};

// A restore's keeper (Note [Parked memory outlives gcrd] in keeper.h): destroyed without done(),
// it ends the restored process (as if gcrd had died).
class RestoreGuard {
 public:
  virtual ~RestoreGuard() = default;
  virtual Status restored(pid_t pid) = 0;
  virtual Status restoring_in(pid_t pid) = 0;
  virtual Status restoring_in_namespace(pid_t unshare_pid,
                                        const std::filesystem::path& ready_file) = 0;
  // The process holds its memory (or the table that makes it wait for it), or is gone.
  virtual void done() = 0;
};

class RestoreKeepers {
 public:
  virtual ~RestoreKeepers() = default;
  // Keeper::start_restore.
  virtual Result<std::unique_ptr<RestoreGuard>> start(const std::filesystem::path& pidfile,
                                                      int host_pages_fd) = 0;
};

// A control session with a restored process (gcr/control.h); destroyed, it drops the connection
// (the interposer then ends a process whose loads are pending: op_cow_end).
class RestoredSession {
 public:
  virtual ~RestoredSession() = default;
  virtual Status cow_begin(int table_fd, std::uint32_t entries) = 0;
  virtual Status unpark(const std::vector<control::ParkedRegion>& regions) = 0;
  virtual Status resume() = 0;
  virtual Status cow_end() = 0;
  virtual Status close() = 0;
};

// The processes of this machine, as a restore sees, reaches and ends them.
class RestoredProcesses {
 public:
  virtual ~RestoredProcesses() = default;
  // Whether something holds `pid` (kill(pid, 0) succeeds, or is refused).
  virtual bool pid_in_use(pid_t pid) = 0;
  // Whether gcrd may make a PID namespace (root).
  virtual bool privileged() = 0;
  virtual std::vector<pid_t> tree_pids(pid_t root) = 0;
  // Its pid in its innermost PID namespace (job.h).
  virtual pid_t innermost_pid(pid_t pid) = 0;
  // A control session (waits up to 10 s for it).
  virtual Result<std::unique_ptr<RestoredSession>> connect(pid_t pid) = 0;
  virtual void kill_tree(pid_t root) = 0;
  virtual void kill(pid_t pid) = 0;  // SIGKILL
  // Waits (up to 5 s) until pid is gone or a zombie.
  virtual void wait_gone(pid_t pid) = 0;
};

}  // namespace gcr::gcrd
