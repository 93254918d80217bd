// Live checkpoints of a process every period, driven by gcrd (issue 37's first tier: the local
// store).
//
// Note [Checkpoints every period]
// `gcr run --checkpoint-every DURATION [--keep K] [--checkpoint-name NAME] -- PROGRAM` asks gcrd
// (verb `every`, before it becomes the program: the pid is the same) to checkpoint the program
// live every DURATION into the caller's store. gcrd keeps one schedule per process, each on a
// thread of its own:
// - Each checkpoint is gcr's --leave-running checkpoint of the process, incremental after the
//   first (the process's lineage, Note [gcrd owns lineage]). It is named NAME.N (N counting from
//   1), and NAME moves to the newest complete one, so that `gcr restore NAME` brings back the
//   latest. The default NAME is every-PID.
// - Never two at once: a checkpoint still being stored when the next is due delays the next
//   (counted as `delayed`; the next starts as soon as the one before is committed).
// - Beyond K (default 3) the oldest are removed once the newest is committed, and gc frees the
//   chunks nothing else holds. A checkpoint that failed removes nothing.
// - The schedule ends with the process (its pid gone, or taken by another: its start time is
//   kept). A gcrd that stops keeps its schedules in its own directory (`schedules/PID`, 0600: a
//   job's holds the key of its hosts), and the next gcrd starts again those whose process still
//   runs (the same start time), counting on from their tags.
// - A process, or a job, restored from one of its checkpoints (META every_ms, every_keep,
//   every_name, every_seq) is scheduled again by the gcrd that restored it, counting on from that
//   checkpoint's N (a job: by its new coordinator, with its hosts as restored and as many peer
//   copies as before).
// - `gcr ps` shows each schedule: the newest checkpoint, its age, how many, delays and the last
//   failure (verb `work`: every.PID.* fields), and the tiers that hold the newest.
// - A job across hosts (`gcr checkpoint --job ... --every DURATION`) is scheduled by the gcrd
//   that coordinates it, under its local root's pid: each is the job's checkpoint (Note [A job
//   across hosts] in job_link.h) named NAME.N on every host, then copied into peers' memory with
//   --peer-copies (Note [Checkpoints in peers' memory] in memory_tier.h); beyond K the oldest is
//   removed here and its parts on their hosts (verb tier, op remove).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gcr/criu.h"
#include "gcr/result.h"
#include "gcr/store.h"
#include "job_serve.h"
#include "work_registry.h"

namespace gcr::gcrd {

struct EveryRequest {
  pid_t pid = 0;
  std::chrono::milliseconds every{60'000};
  unsigned keep = 3;
  std::string name;         // empty: every-PID
  std::uint64_t after = 0;  // a schedule again after a restore: its checkpoints count on from here
  // A job across hosts: this host's other trees, the other hosts' ranks, and the job's options
  // (the key, and peer.copies, peer.self_address).
  std::vector<pid_t> job_pids;
  std::vector<JobHost> hosts;
  JobOptions job;
};

// What `gcr ps` shows of a schedule.
struct EveryStatus {
  EveryRequest request;
  std::uint64_t count = 0, delayed = 0, failed = 0;
  std::string last_id, last_error;
  std::chrono::steady_clock::time_point last_at{};
  std::uint64_t last_stall_ns = 0;
  std::string last_tiers;  // "local", or "local+peers", or "local, peers 1/2"
};

class Periodic {
 public:
  Periodic();
  Periodic(const Periodic&) = delete;
  Periodic& operator=(const Periodic&) = delete;
  ~Periodic();  // ends every schedule (a checkpoint under way finishes first)

  // Starts (or replaces) the schedule of req.pid, checkpointing into `store` with `tools`.
  Status start(EveryRequest req, std::shared_ptr<store::Store> store, criu::Tools tools,
               WorkRegistry* work);
  std::map<pid_t, EveryStatus> snapshot();

  // Keeps every schedule in `dir` (a private directory) from now on, and starts again those a
  // gcrd before this one kept there whose process still runs; `log` says what it did.
  void persist_in(const std::filesystem::path& dir, const std::filesystem::path& self_dir,
                  WorkRegistry* work, const std::function<void(const std::string&)>& log);

 private:
  struct Schedule;
  void run(Schedule& s);
  void save(const Schedule& s);  // its file in dir_ (none without dir_)
  Result<CheckpointReport> take(Schedule& s, std::uint64_t n);
  void committed(Schedule& s, std::uint64_t n, std::chrono::steady_clock::time_point t,
                 CheckpointReport& rep);
  void remove_parts(Schedule& s, const store::CheckpointId& id);
  void reap();  // joins the schedules whose process is gone

  std::mutex mu_;
  std::map<pid_t, std::unique_ptr<Schedule>> schedules_;
  std::vector<std::unique_ptr<Schedule>> retired_;  // replaced, not yet joined (reap())
  std::filesystem::path dir_;                       // persist_in()
};

}  // namespace gcr::gcrd
