// The processes of a job's bystanding host held still while one of the job's ranks moves (Note [A
// rank moved while its job runs] in job_move.h).
//
// Every thread of every process is ptrace-seized and interrupted by the calling thread, which
// must also thaw them. Unlike SIGSTOP, nothing of it is reported to the processes' parents (a
// shell sees no job stopped), and gcrd's death undoes it: the kernel detaches a dead tracer's
// tracees, and they run on. A signal that arrives while a thread is held is delivered when it is
// let go. A thread that does not stop within 5 s (uninterruptible sleep) fails the freeze; the
// kernel lets it go when the calling thread ends.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <vector>

#include "gcr/result.h"

namespace gcr::gcrd {

class FrozenThreads {
 public:
  FrozenThreads() = default;
  FrozenThreads(FrozenThreads&& other) noexcept : threads_(std::move(other.threads_)) {
    other.threads_.clear();
  }
  FrozenThreads& operator=(FrozenThreads&& other) noexcept;
  FrozenThreads(const FrozenThreads&) = delete;
  FrozenThreads& operator=(const FrozenThreads&) = delete;
  ~FrozenThreads() { thaw(); }

  // Holds every thread of `pids`, threads started meanwhile included; on a failure none is held.
  static Result<FrozenThreads> freeze(const std::vector<pid_t>& pids);
  // Lets every thread go on (idempotent).
  void thaw();
  std::size_t threads() const { return threads_.size(); }

 private:
  struct Thread {
    pid_t tid = 0;
    int signal = 0;  // a signal it stopped for, delivered when it is let go
  };
  std::vector<Thread> threads_;
};

}  // namespace gcr::gcrd
