// What gcrd is doing to which process right now. A process whose control session gcrd holds (a
// checkpoint quiescing, parking or storing it) cannot answer `gcr ps` itself; gcrd says what its
// transaction has made of it (Note [Checkpoint phases] in checkpoint_txn.h), so that `gcr ps`
// shows each process's true state: running, quiesced, parked, stopped, or running while its
// checkpoint drains.
#pragma once

#include <sys/types.h>

#include <map>
#include <mutex>
#include <string>

namespace gcr::gcrd {

class WorkRegistry {
 public:
  struct Work {
    std::string operation;  // "checkpoint"
    std::string phase;      // the transaction's phase
    std::string state;      // the process's state it has made: running, quiesced, parked, ...
  };
  void set(pid_t pid, Work work);
  void erase(pid_t pid);
  std::map<pid_t, Work> snapshot() const;

 private:
  mutable std::mutex mu_;
  std::map<pid_t, Work> work_;
};

}  // namespace gcr::gcrd
