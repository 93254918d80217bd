// A fake world for the checkpoint transaction (daemon/checkpoint_txn.h): processes whose
// device memory is memfds, control sessions, keepers and a CRIU that follow the real rules
// (docs/protocol.md §5: a session never leaves a process quiesced; a stopped process does not
// answer; CRIU cannot dump a process that holds a session), a real store in a temporary
// directory, and a failure injectable at every call. Every call is logged by name ("park 101"),
// so a test can run a checkpoint once, then fail each call it made in turn.
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

#include "checkpoint_ports.h"
#include "checkpoint_txn.h"
#include "gcr/store.h"
#include "gcr/unique_fd.h"

namespace gcr::gcrd::test {

struct FakeRegion {
  std::uint64_t address = 0;
  std::vector<std::byte> bytes;
  bool dirty = true;
  UniqueFd memfd;  // the physical allocation; views of a shared one hold the same file
};

struct FakeProcess {
  pid_t pid = 0;
  std::vector<FakeRegion> regions;
  bool alive = true;
  bool gate_open = true;       // running CUDA calls (else quiesced)
  bool memory_parked = false;  // its regions are with gcrd
  bool stopped = false;        // CRIU left it stopped
  bool session_open = true;
  bool cow_active = false;
  enum class Keeper { none, holding, done, gave_back } keeper = Keeper::none;
  // After the release, the process writes region 0 first thing (soft copy-on-write copies it).
  bool writes_after_resume = false;
  std::vector<std::byte> written;  // what it writes there
};

struct Config {
  bool leave_running = true;
  bool several_trees = false;
  bool external = false;  // a runtime's CRIU dumps after the commit
  bool device_only = false;
  bool runtime_keeps_running = false;
  std::optional<bool> hold;  // a migration: true ends the process, false hands it back
  int members = 1;
  bool share = false;  // members 0 and 1 share their region 1
};

class World {
 public:
  explicit World(Config config);
  ~World();

  // Runs a checkpoint (prepare, then commit) of member 0's tree.
  Status checkpoint();
  // The transaction of the last checkpoint().
  CheckpointTransaction& transaction() { return *tx_; }
  // Builds the transaction without running it (for a two-phase commit of several worlds).
  CheckpointTransaction& build(store::Store& shared_store);

  // The calls made, in order; a call named here fails (once).
  std::vector<std::string> calls;
  std::set<std::string> fail;
  std::vector<FakeProcess> procs;
  Config config;
  store::Store& store() { return *store_; }
  std::filesystem::path root;
  // The time the transaction sees; a call named in `slow` takes this long.
  Transaction::Clock::time_point now{};
  std::map<std::string, Transaction::Clock::duration> slow;
  Transaction::Clock::duration limit = Transaction::Clock::duration::max();
  std::optional<store::CheckpointId> parent;

  // Returns true (and logs) when `name` is to fail now.
  bool call(const std::string& name);

  // Checks what must hold after a failed checkpoint: every process alive, running, with its
  // memory, not stopped; no keeper holding; nothing new committed. Empty when it all holds.
  std::string failed_state(std::size_t committed_before) const;
  std::size_t committed() const;

  CheckpointRequest request;

 private:
  std::shared_ptr<store::Store> own_store_;
  store::Store* store_ = nullptr;
  std::unique_ptr<CheckpointStore> ports_store_;
  std::unique_ptr<JobSessions> sessions_;
  std::unique_ptr<Keepers> keepers_;
  std::unique_ptr<Dumper> dumper_;
  std::unique_ptr<DeviceHolder> device_;
  std::unique_ptr<CheckpointTransaction> tx_;
};

// A plain participant of a two-phase commit, for TwoPhaseCommit's own tests.
class FakeParticipant : public Participant {
 public:
  FakeParticipant(std::string name, std::vector<std::string>& log) : name_(name), log_(log) {}
  std::string name() const override { return name_; }
  Status prepare() override;
  Status commit() override;
  void abort() override { log_.push_back(name_ + " abort"); }
  bool fail_prepare = false, fail_commit = false;

 private:
  std::string name_;
  std::vector<std::string>& log_;
};

}  // namespace gcr::gcrd::test
