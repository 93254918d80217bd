// A transaction of gcrd's: named phases, each leaving its undo, run in reverse on any failure
// (DESIGN.md §10, "A checkpoint is a transaction"). The checkpoint (checkpoint_txn.h) and the
// restore (restore_txn.h) are built on it, and so is the two-phase commit of a job whose parts
// are several transactions (TwoPhaseCommit below).
//
// Note [Transactions]
// - A phase is a short function returning Status. Before it runs, the transaction checks its
//   deadline: a transaction past it fails with Errc::timeout before the next phase starts (a
//   phase that waits is given time_left() to wait for).
// - What a phase has done that must be undone should anything later fail, it says with on_undo()
//   as soon as it has done it (not at the end of the phase: a phase that fails half-way has its
//   own half undone too). Undos run in the reverse order of their registration, each once, and
//   must not fail: an undo that cannot do its work leaves the process to the keeper (keeper.h),
//   which is the undo of last resort, and says so in the journal.
// - abort() runs the undos; commit() drops them (what is done is kept). A transaction destroyed
//   without either aborts: an early return can never leave a process parked.
// - The journal records every phase begun, failed and undone, in order: tests assert on it, and
//   gcrd's log shows it for a failed request.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gcr/result.h"

namespace gcr::gcrd {

class Transaction {
 public:
  using Clock = std::chrono::steady_clock;
  using Undo = std::function<void()>;
  // Told of each phase as it begins (gcrd's registry of work in progress: `gcr ps`).
  using Observer = std::function<void(const std::string& phase)>;

  explicit Transaction(std::string what, Clock::duration limit = Clock::duration::max(),
                       std::function<Clock::time_point()> now = Clock::now);
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();

  void set_observer(Observer observer) { observer_ = std::move(observer); }

  // Runs phase `name` (after checking the deadline); on failure, aborts and returns the error.
  Status run(const std::string& name, const std::function<Status()>& phase);
  // Registers the undo of something the current phase has just done.
  void on_undo(std::string what, Undo undo);
  // Drops the undos registered so far under `what` (what they undo no longer needs it: memory
  // given back, a process ended). Returns how many were dropped.
  std::size_t forget_undo(const std::string& what);

  void abort();
  void commit();

  bool finished() const { return finished_; }
  const std::string& phase() const { return phase_; }
  // What is left of the limit (zero once past it).
  Clock::duration time_left() const;
  const std::vector<std::string>& journal() const { return journal_; }
  void note(std::string line) { journal_.push_back(std::move(line)); }

 private:
  struct Step {
    std::string what;
    Undo undo;
  };
  std::string what_;
  std::function<Clock::time_point()> now_;
  Clock::time_point deadline_;
  Observer observer_;
  std::vector<Step> undos_;
  std::vector<std::string> journal_;
  std::string phase_;
  bool finished_ = false;
};

// A part of a transaction that spans several transactions (a job's trees on several hosts):
// prepare does everything but make the result visible, and keeps the undos; commit makes it
// visible; abort undoes a prepared (or failed) part.
class Participant {
 public:
  virtual ~Participant() = default;
  virtual std::string name() const = 0;
  virtual Status prepare() = 0;
  virtual Status commit() = 0;
  virtual void abort() = 0;
};

// Prepares every participant; if all did, commits every one; else aborts every one that was
// asked to prepare (the one that failed included, which may have half-prepared). A commit that
// fails after others committed is reported with the names of both (the parts already committed
// stay: a committed checkpoint is never removed by another's failure).
class TwoPhaseCommit {
 public:
  void add(Participant& p) { parts_.push_back(&p); }
  Status run();
  const std::vector<std::string>& journal() const { return journal_; }

 private:
  std::vector<Participant*> parts_;
  std::vector<std::string> journal_;
};

}  // namespace gcr::gcrd
