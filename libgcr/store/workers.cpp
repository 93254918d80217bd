// WorkerPool: see gcr/store_workers.h.
#include "gcr/store_workers.h"

#include <pthread.h>
#include <sched.h>

#include "gcr/background.h"

namespace gcr::store {

unsigned usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return static_cast<unsigned>(n);
  }
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : n;
}

WorkerPool::WorkerPool(unsigned parallelism) {
  if (parallelism == 0) parallelism = usable_cpus();
  for (unsigned i = 1; i < parallelism; ++i) {
    threads_.emplace_back([this] { worker(); });
    pthread_setname_np(threads_.back().native_handle(), "gcr-store");
  }
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::run(Job& job) {
  for (;;) {
    std::size_t i = job.next.fetch_add(1);
    if (i >= job.n) return;
    (*job.fn)(i);
    if (job.done.fetch_add(1) + 1 == job.n) {
      std::lock_guard lock(mu_);
      done_cv_.notify_all();
    }
  }
}

void WorkerPool::worker() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (stop_ && jobs_.empty()) return;
      job = jobs_.front();
      // A job whose indices are all handed out leaves the queue; its runners finish it.
      if (job->next.load() >= job->n) {
        jobs_.pop_front();
        continue;
      }
    }
    BackgroundScope in_class;  // a background job's class (gcr/store_workers.h)
    in_class.set(job->background);
    run(*job);
  }
}

void WorkerPool::parallel_for(std::size_t n, const std::function<void(std::size_t)>& fn) {
  if (n == 0) return;
  if (threads_.empty() || n == 1) {
    for (std::size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->n = n;
  job->background = in_background();
  {
    std::lock_guard lock(mu_);
    jobs_.push_back(job);
  }
  work_cv_.notify_all();
  run(*job);
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return job->done.load() == n; });
  // Drop it from the queue if no worker did.
  for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
    if (*it == job) {
      jobs_.erase(it);
      break;
    }
  }
}

}  // namespace gcr::store
