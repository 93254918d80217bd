// gcrd's implementations of the checkpoint's ports (checkpoint_ports.h): the members' real
// control sessions, gcr-keeper processes, CRIU (gcr's own, or a container runtime's), the GPU.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "checkpoint_ports.h"
#include "device.h"
#include "gcr/criu.h"
#include "gcr/tcp_lock.h"
#include "host_tracking.h"
#include "job.h"
#include "job_link.h"
#include "keeper.h"
#include "lineage.h"
#include "work_dir.h"

namespace gcr::gcrd {

class MemberSessions final : public JobSessions {
 public:
  MemberSessions(std::vector<Member>& members, std::vector<SharedAllocation> shared, CarriedTcp tcp,
                 JobLink* link, Gpu& gpu);
  std::size_t size() const override { return members_.size(); }
  pid_t pid(std::size_t m) const override { return members_[m].pid; }
  Status cut(std::chrono::milliseconds timeout, const Progress& progress) override;
  void end_cut() override;
  Status quiesce(std::chrono::milliseconds timeout) override;
  Status resume(std::size_t m) override { return members_[m].client.resume(); }
  Result<std::vector<control::ParkedRegion>> park(std::size_t m) override {
    return members_[m].client.park();
  }
  Status unpark(std::size_t m, const std::vector<control::ParkedRegion>& regions) override {
    return members_[m].client.unpark(regions);
  }
  Result<std::vector<std::uint64_t>> touch_order(std::size_t m) override {
    return members_[m].client.touch_order();
  }
  Result<control::HostDmaRanges> host_dma(std::size_t m) override {
    return members_[m].client.host_dma();
  }
  Status new_epoch(std::size_t m, const std::string& id) override {
    return members_[m].client.new_epoch(id);
  }
  Status close(std::size_t m) override;
  Result<control::Client> connect_again(std::size_t m);
  Status reopen(std::size_t m) override;
  bool is_open(std::size_t m) const override { return open_[m]; }
  bool give_back(std::size_t m, const std::vector<control::ParkedRegion>& regions) override;
  Result<bool> ensure_running(std::size_t m) override;
  Status cow_begin(std::size_t m, int fd, std::uint32_t entries) override;
  Result<std::unique_ptr<HeldMemory>> cow_take(std::size_t m, std::uint32_t index,
                                               std::uint64_t size) override;
  Status cow_end(std::size_t m) override { return members_[m].client.cow_end(); }
  bool gone(std::size_t m) const override;

 private:
  // Member m's pid still names member m (not a process that took the pid after it died).
  bool same_process(std::size_t m) const;

  std::vector<Member>& members_;
  const std::vector<SharedAllocation> shared_;  // for the cut (a copy: the plan moves on)
  const CarriedTcp tcp_;                        // ibid.
  JobLink* link_;                               // Note [A job across hosts] (job_link.h)
  Gpu& gpu_;
  std::vector<bool> open_;
  // Each closed session's lock, held from close() to reopen() or give_back(): nobody else
  // connects to a member while CRIU dumps it (Client::close_keeping_lock).
  std::vector<UniqueFd> locks_;
  // Note [Copies handed over] (gcr/cow_table.h): gcrd's end of each member's socket, and the
  // copies that arrived on it, by entry.
  std::vector<UniqueFd> handover_;
  std::vector<std::map<std::uint32_t, UniqueFd>> handed_;
};

class ProcessKeepers final : public Keepers {
 public:
  Status start(pid_t pid, const std::vector<control::ParkedRegion>& parked,
               const std::vector<pid_t>& stopped_roots) override;
  void done() override;
  void abandon() override { keepers_.clear(); }
  void handed_over() override;
  void kept() override;
  void say(const std::string& lines);

 private:
  std::vector<Keeper> keepers_;
};

class GpuHolder final : public DeviceHolder {
 public:
  explicit GpuHolder(Gpu& gpu) : gpu_(gpu) {}
  Result<std::unique_ptr<HeldMemory>> import(int fd, std::uint64_t size) override;

 private:
  Gpu& gpu_;
};

// gcr's own CRIU: one dump of the tree, or one per tree of a job (Note [A job of several trees]).
class CriuDumper final : public Dumper {
 public:
  // `members`: the job's processes under gcr (a --cow-dma file with nothing known names them).
  CriuDumper(const criu::Tools& tools, const CheckpointRequest& request, const JobTrees& trees,
             ProcessKey key, std::vector<pid_t> members);
  ~CriuDumper() override;
  std::string images_in() const override;
  Result<bool> prepare(const PinnedHostMemory& pinned, const Progress& progress) override;
  void cancel() override;
  bool wants_pinned() const override { return tracking_ || dma_file_; }
  Status pinned_known(const PinnedHostMemory* pinned) override;
  Result<DumpOutcome> dump(const PinnedHostMemory& pinned, std::uint64_t* lifted) override;
  void continue_trees() override;
  void after_resume() override { remove_tcp_lock(); }
  Result<bool> finish() override;
  Result<Stored> store(store::CheckpointWriter& writer) override;
  void end_trees() override;
  Result<bool> dump_after_commit(const std::string&) override;
  // Where the lock on carried connections is told, so that a keeper releases it should gcrd die
  // (Note [TCP within a job] in job_tcp.h).
  void tell_keepers(std::function<void(const std::string&)> say) { say_ = std::move(say); }

 private:
  void say_fallbacks(const Progress& progress) const;
  void stop_tracking(bool forget);
  Status lock_tcp();
  void end_tcp_repair();
  void remove_tcp_lock();
  const criu::Tools& tools_;
  const CheckpointRequest& req_;
  const JobTrees& trees_;
  ProcessKey key_;
  std::vector<pid_t> members_;
  bool several_;
  bool in_memory_ = false;
  std::optional<WorkDir> work_;
  criu::DumpOptions options_;
  UniqueFd dma_file_;
  std::optional<TrackedDump> tracking_;
  std::optional<WorkDir> dump_parent_;  // --track-mem's previous dump (dump_parents.h)
  std::optional<criu::StartedDump> early_;
  std::vector<criu::StartedDump> early_trees_;
  bool criu_running_ = false;  // let the process go, still writing host memory (--cow-dump)
  // Note [TCP within a job] (job_tcp.h): held from before the first dump until every tree is.
  TcpLock tcp_lock_;
  std::optional<RepairedSockets> repaired_;  // the carried sockets of trees left stopped
  std::function<void(const std::string&)> say_ = [](const std::string&) {};
};

// A container runtime's CRIU (Note [CRIU run by someone else]), or none (a device-only round).
class RuntimeDumper final : public Dumper {
 public:
  explicit RuntimeDumper(const CheckpointRequest& request) : req_(request) {}
  std::string images_in() const override { return "runtime"; }
  Result<bool> prepare(const PinnedHostMemory&, const Progress&) override { return false; }
  void cancel() override {}
  bool wants_pinned() const override { return false; }
  Status pinned_known(const PinnedHostMemory*) override { return ok(); }
  Result<DumpOutcome> dump(const PinnedHostMemory&, std::uint64_t*) override;
  void continue_trees() override {}
  Result<bool> finish() override { return false; }
  Result<Stored> store(store::CheckpointWriter&) override { return Stored{}; }
  void end_trees() override {}
  Result<bool> dump_after_commit(const std::string& checkpoint_id) override;

 private:
  const CheckpointRequest& req_;
};

}  // namespace gcr::gcrd
