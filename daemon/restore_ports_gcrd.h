// gcrd's implementations of the restore's ports (restore_ports.h): the GPUs through the driver
// (device.h) with what a migration staged (staged.h) and the loader (loader.h), gcr's own CRIU
// (gcr/criu.h) with gcrd's server of host memory (host_pages.h), gcr-keeper processes (keeper.h),
// and the processes of this machine with their control sessions (gcr/control.h).
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "device.h"
#include "gcr/criu.h"
#include "restore_ports.h"

namespace gcr::gcrd {

class GpuDevices final : public RestoreDevices {
 public:
  Status open() override;
  int count() const override { return gpu_->device_count(); }
  std::uint64_t free_bytes(int device) override { return gpu_->free_bytes(device); }
  Status use(int device) override { return gpu_->use(device); }
  Result<std::unique_ptr<DeviceRegion>> allocate(std::uint64_t size, int device) override;
  bool is_staged(const store::Manifest& m, const store::ObjectEntry& object, int device) override;
  std::unique_ptr<DeviceRegion> take_staged(const store::Manifest& m,
                                            const store::ObjectEntry& object, int device) override;
  void drop_staged() override;
  Result<std::unique_ptr<DeviceLoad>> load(std::unique_ptr<store::CheckpointReader> reader,
                                           std::vector<LoadItem> items, const CowTable* table,
                                           std::vector<LoadWatch> watches,
                                           bool behind_restore) override;

 private:
  Gpu* gpu_ = nullptr;
};

class GcrCriuRestorer final : public CriuRestorer {
 public:
  explicit GcrCriuRestorer(const criu::Tools& tools) : tools_(tools) {}
  bool lazy_pages_available() override;
  std::map<std::string, std::string> driver_env() override;
  Result<std::unique_ptr<ImageDir>> image_dir() override;
  Result<std::unique_ptr<HostPageServer>> plan_host_pages(store::CheckpointReader& reader) override;
  bool may_reopen_as_pipe(int fd) override;
  Result<UniqueFd> relay_into(int target) override;
  Status restore(const criu::RestoreOptions& options,
                 std::unique_ptr<LazyHostMemory>* lazy) override;

 private:
  const criu::Tools& tools_;
};

class KeeperProcesses final : public RestoreKeepers {
 public:
  Result<std::unique_ptr<RestoreGuard>> start(const std::filesystem::path& pidfile,
                                              int host_pages_fd) override;
};

class LocalProcesses final : public RestoredProcesses {
 public:
  bool pid_in_use(pid_t pid) override;
  bool privileged() override;
  std::vector<pid_t> tree_pids(pid_t root) override;
  pid_t innermost_pid(pid_t pid) override;
  Result<std::unique_ptr<RestoredSession>> connect(pid_t pid) override;
  void kill_tree(pid_t root) override;
  void kill(pid_t pid) override;
  void wait_gone(pid_t pid) override;
};

}  // namespace gcr::gcrd
