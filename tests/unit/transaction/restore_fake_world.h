// A fake world for the restore transaction (daemon/restore_txn.h): a real store in a temporary
// directory holding a checkpoint, GPUs whose memory is memfds (with what a migration staged), a
// loader, a CRIU (and a container runtime) that restore parked processes, keepers, CRIU's
// lazy-pages daemon and gcrd's server of host memory, and control sessions that follow the real
// rules (docs/protocol.md §5: a process waits at its closed gate until it is unparked; with a load
// table it waits for what is not loaded; a session dropped with loads pending ends the process).
// Every call a fake can fail is logged by name ("unpark 1000"), and so is every release ("free",
// "images_removed"), so that a test can run a restore once, then fail each call it made in turn,
// and check the order in which what was done is undone.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gcr/store.h"
#include "gcr/unique_fd.h"
#include "restore_ports.h"
#include "restore_txn.h"

namespace gcr::gcrd::test {

struct RestoreConfig {
  bool eager = false;          // --eager
  bool external = false;       // a container runtime's CRIU (the checkpoint's criu_images=external)
  int members = 1;             // 2: a job of one tree whose members share a region
  bool several_trees = false;  // with members = 2: a job of two trees, a socket between them
  bool stop_copy = false;      // a --stop-copy image: no device memory
  bool staged = false;         // a migration staged region 0 as it is, region 1 as it was before
  bool lazy = false;           // CRIU's lazy pages
  bool host_from_store = true;  // with lazy: gcrd serves the host memory (else CRIU's images)
  bool pid_in_use = false;      // the original pid is held: a new PID namespace (as root)
  bool relay = false;           // the caller hands a file CRIU cannot reopen: a relay
  bool arriving = false;        // named by its full id, still arriving
};

// A process CRIU (or a runtime) restored.
struct FakeRestored {
  pid_t pid = 0;     // as gcrd sees it
  pid_t ns_pid = 0;  // in its own PID namespace: the checkpoint's
  pid_t root = 0;    // its tree's root, as gcrd sees it
  pid_t criu = 0;    // the CRIU that restored it
  std::string owner;
  bool alive = true;
  bool parked = true;  // waits at its closed gate for its memory
  bool running = false;
  bool session = false;
  bool table = false;                        // waits, on demand, for what is not loaded
  std::map<std::uint64_t, UniqueFd> memory;  // what it maps, by address
  bool ran_on_missing = false;               // ran on bytes it did not get: the invariant broken
};

// A region of the checkpoint, as its process maps it.
struct FakeCheckpointRegion {
  std::string owner;
  std::uint64_t address = 0;
  std::vector<std::byte> bytes;
  std::string stored_owner;  // a view of a shared allocation: where it is stored
  std::uint64_t stored_address = 0;
};

// Memory a migration staged: its contents' key (address, size, device, chunks) and bytes.
struct FakeStaged {
  std::string key;
  UniqueFd memfd;
};

class RestoreWorld {
 public:
  explicit RestoreWorld(RestoreConfig config);
  ~RestoreWorld();

  // Builds a restore transaction, runs it, and destroys it (so that what it owns is released);
  // its journal and report stay.
  Status restore();
  std::vector<std::string> journal;
  std::optional<RestoreReport> report;

  // The calls made, in order, with the transaction's phases ("phase criu", "phase aborted");
  // "name" in `fail` fails its first call, "name@k" its k-th (once).
  std::vector<std::string> calls;
  std::set<std::string> fail;
  bool call(const std::string& name);
  // The time the transaction sees; a call named in `slow` (as in `fail`) takes this long.
  Transaction::Clock::time_point now{};
  std::map<std::string, Transaction::Clock::duration> slow;
  Transaction::Clock::duration limit = Transaction::Clock::duration::max();
  // With a limit: from the past_deadline_at-th time the transaction reads the clock (the first is
  // its start, then one before each phase), it is past its deadline.
  int past_deadline_at = 0;
  int clock_reads = 0;

  RestoreConfig config;
  RestoreRequest request;
  store::CheckpointId checkpoint;
  std::vector<FakeCheckpointRegion> regions;
  std::vector<FakeRestored> procs;
  FakeRestored* proc(pid_t pid);
  std::vector<FakeStaged> staged;
  std::size_t staged_before = 0;  // what was staged before the restore

  // What the world holds now.
  int allocations = 0, loads = 0, image_dirs = 0, lazy_daemons = 0, host_servers = 0;
  std::map<int, std::string> keepers;   // by start order: "holding", "done" or "dropped"
  std::vector<std::string> violations;  // rules a fake saw broken, as they happened

  // Empty when all holds; else what does not.
  std::string failed_state() const;          // after a failed restore
  std::string restored_state() const;        // after a successful one
  std::string checkpoint_unchanged() const;  // its manifest and bytes as written
  std::filesystem::path root;
  store::Store& store() { return *store_; }
  // Whether the bytes a process maps at `address` are the checkpoint's.
  bool has_checkpoint_bytes(const FakeRestored& p, std::uint64_t address) const;

 private:
  void write_checkpoint();
  void stage();
  std::shared_ptr<store::Store> store_;
  std::vector<std::byte> manifest_bytes_;
  std::map<std::string, int> seen_;  // calls by name, for "name@k"
  std::unique_ptr<RestoreStore> store_port_;
  std::unique_ptr<RestoreDevices> devices_;
  std::unique_ptr<CriuRestorer> criu_;
  std::unique_ptr<RestoreKeepers> keepers_;
  std::unique_ptr<RestoredProcesses> processes_;
};

}  // namespace gcr::gcrd::test
