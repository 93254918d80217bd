// WorkerPool: hashing, compression and verification spread over threads. The caller's thread
// works too, so a pool of N runs N-1 threads and never oversubscribes the N cores it was sized for.
// Several threads may call parallel_for at once; their jobs share the workers. A job runs in its
// caller's scheduling class: one called from a thread at SCHED_IDLE (gcrd loading behind a
// restore, daemon/loader.h) runs at SCHED_IDLE on the workers too, so that it takes only
// CPU time nothing else wants.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace gcr::store {

class WorkerPool {
 public:
  // `parallelism` threads in all, counting the caller's; 0 = the CPUs this process may use.
  explicit WorkerPool(unsigned parallelism);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  unsigned parallelism() const { return static_cast<unsigned>(threads_.size()) + 1; }

  // Runs fn(i) for every i in [0, n) and returns when all have run. fn must not throw.
  void parallel_for(std::size_t n, const std::function<void(std::size_t)>& fn);

 private:
  struct Job {
    const std::function<void(std::size_t)>* fn;
    std::size_t n;
    std::atomic<std::size_t> next{0};
    std::atomic<std::size_t> done{0};
    bool background = false;  // its caller runs at SCHED_IDLE
  };
  void run(Job& job);
  void worker();

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::shared_ptr<Job>> jobs_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// CPUs this process may run on (sched_getaffinity), at least 1.
unsigned usable_cpus();

}  // namespace gcr::store
