// The requests gcrd serves (docs/protocol.md §11), decoded from a request line's fields into
// typed values, every field parsed and range-checked before gcrd acts on it: a root daemon never
// reads a number with atoi. A field that is malformed or out of range refuses the request with a
// message naming the field; a field a verb does not know is ignored (a newer client may send it).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gcr/result.h"

namespace gcr::gcrd {

using Fields = std::map<std::string, std::string>;

// Typed access to a request's fields.
class RequestFields {
 public:
  explicit RequestFields(const Fields& fields) : f_(fields) {}
  bool has(const std::string& key) const { return f_.count(key) && !f_.at(key).empty(); }
  // Absent or empty: "". Longer than max_bytes, or holding a NUL or a newline: refused.
  Result<std::string> text(const std::string& key, std::size_t max_bytes = 4096) const;
  // Absent: false; "0" or "1" only.
  Result<bool> flag(const std::string& key) const;
  // Absent or empty: nullopt; decimal digits (an optional '-'), within [lo, hi].
  Result<std::optional<std::int64_t>> integer(const std::string& key, std::int64_t lo,
                                              std::int64_t hi) const;
  // A pid (0 .. 2^22: 0 is "no process 0" to the operation), required.
  Result<pid_t> pid(const std::string& key) const;
  // Comma-separated pids, each once.
  Result<std::vector<pid_t>> pids(const std::string& key) const;

 private:
  const Fields& f_;
};

// verb checkpoint
struct CheckpointFields {
  pid_t pid = 0;
  std::vector<pid_t> job_pids;  // --job: the other trees' roots
  std::optional<std::string> tag;
  bool leave_running = false, stop_copy = false, tcp_close = false, device_only = false;
  bool hold = false;        // gcr migrate's last checkpoint waits for the destination
  bool copy_parts = false;  // a job across hosts: every part copied into this store too
  // The remote hosts are bystanders: pid, a rank of theirs, moves (Note [A rank moved while its
  // job runs] in job_move.h): a pre-copy round (leave_running) or the stop (hold).
  bool move = false;
  std::chrono::milliseconds timeout{10'000};
  // Note [A job across hosts] (job_link.h): the other hosts' ranks (remote.N "HOST:PORT",
  // remote_pids.N "PID,PID"), the caller's key for them (net_key_name, net_key), and how long a
  // silent host is waited for (idle_ms).
  struct Remote {
    std::string address;
    std::vector<pid_t> pids;
  };
  std::vector<Remote> remote;
  std::string net_key_name, net_key;
  std::chrono::milliseconds idle{30'000};
  // Note [Checkpoints in peers' memory] (memory_tier.h): copies of every part in the memory of
  // this many other hosts of the job.
  unsigned peer_copies = 0;
  // Note [Checkpoints every period] (periodic.h): a job checkpointed every period (every_ms, 0:
  // once now), keeping every_keep.
  std::chrono::milliseconds every{0};
  unsigned every_keep = 3;
  // label.KEY: the user's own words, kept in the manifest's META as label.KEY (gcr checkpoint
  // --label; gcr slurm records its job's tasks so).
  std::map<std::string, std::string> labels;
};
Result<CheckpointFields> decode_checkpoint(const Fields& f);

// verb job_part (Note [A job across hosts]): this host's part of a job's checkpoint.
// Note [Checkpoints every period] (periodic.h).
struct EveryFields {
  pid_t pid = 0;
  std::chrono::milliseconds every{60'000};
  unsigned keep = 3;
  std::string name;
};
Result<EveryFields> decode_every(const Fields& f);

// verb tier (Note [Checkpoints in peers' memory] in memory_tier.h): op keep (a copy pulled into
// this gcrd's memory from the gcrd at `from`) or op remove (a job part of this store).
struct TierFields {
  std::string op, from, id, series, origin;
  std::uint64_t seq = 0, protect = 0, oldest = 0;
};
Result<TierFields> decode_tier(const Fields& f);

struct JobPartFields {
  std::vector<pid_t> pids;
  bool leave_running = false;
  std::chrono::milliseconds timeout{10'000}, idle{30'000};
  std::string job;
  bool bystander = false, freeze = false;  // Note [A rank moved while its job runs] (job_move.h)
};
Result<JobPartFields> decode_job_part(const Fields& f);

// verb restore
struct RestoreFields {
  std::string name;
  std::optional<int> device;
  std::string device_map;  // as given; parse_device_map checks it
  bool eager = false, arriving = false, new_pid_namespace = false;
  std::vector<std::string> inherit;  // inherit.0 .. inherit.N-1: the key of file i
  // Note [A job across hosts] (job_link.h): this host's part, for a coordinator (job_part); or,
  // restoring a job, the key of its other hosts (net_key_name, net_key); idle_ms for both.
  bool job_part = false;
  bool take_addresses = false;  // a part restored on a replacement host
  // place.N=OLD=NEW: the part of the host whose gcrd was OLD (HOST:PORT) restored on NEW's.
  std::map<std::string, std::string> place;
  std::string net_key_name, net_key;
  std::chrono::milliseconds idle{30'000};
  // A placed part (job_part, from the network), pulled while it is restored from the gcrd at
  // pull_from (its peer memory with pull_memory): Note [Checkpoints in peers' memory].
  std::string pull_from;
  bool pull_memory = false;
  // A clone (Note [A clone's network] in clone_network.h): clone=1 and its network, clone_netns
  // or clone_address with clone_bridge (and clone_gateway).
  bool clone = false;
  std::string clone_netns, clone_address, clone_bridge, clone_gateway, clone_hostname;
};
// `files`: how many files came with the request; each needs its inherit.N key.
Result<RestoreFields> decode_restore(const Fields& f, std::size_t files);

// verb criu_dump (gcr's CRIU plugin, for a runtime's CRIU)
struct CriuDumpFields {
  pid_t pid = 0;
  std::chrono::milliseconds timeout{10'000};
};
Result<CriuDumpFields> decode_criu_dump(const Fields& f);

// verb criu_restore
struct CriuRestoreFields {
  std::string name;
  std::string device_map;
};
Result<CriuRestoreFields> decode_criu_restore(const Fields& f);

}  // namespace gcr::gcrd
