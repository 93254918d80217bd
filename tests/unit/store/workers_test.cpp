// WorkerPool: every index runs exactly once, from several callers at once; a background caller's
// job runs in the background on the workers, which come back to their own class.
#include <catch2/catch.hpp>

#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "gcr/background.h"
#include "gcr/store_workers.h"

using namespace gcr::store;

TEST_CASE("parallel_for runs every index exactly once", "[workers]") {
  unsigned threads = GENERATE(1u, 2u, 4u);
  WorkerPool pool(threads);
  std::vector<std::atomic<int>> hits(1000);
  pool.parallel_for(hits.size(), [&](std::size_t i) { hits[i]++; });
  for (auto& h : hits) CHECK(h.load() == 1);
  pool.parallel_for(0, [&](std::size_t) { FAIL("no work expected"); });
}

TEST_CASE("several threads may share one pool", "[workers]") {
  WorkerPool pool(3);
  std::atomic<long> sum{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      for (int round = 0; round < 50; ++round) {
        pool.parallel_for(100, [&](std::size_t i) { sum += static_cast<long>(i); });
      }
    });
  }
  for (auto& c : callers) c.join();
  CHECK(sum.load() == 4L * 50 * 4950);
}

namespace {

// The classes the workers (not the calling thread) ran fn's indices in.
std::set<int> worker_classes(WorkerPool& pool) {
  const pid_t caller = gettid();
  std::mutex mu;
  std::set<int> seen;
  pool.parallel_for(64, [&](std::size_t) {
    usleep(1000);  // long enough that the worker takes some
    if (gettid() == caller) return;
    std::lock_guard lock(mu);
    seen.insert(sched_getscheduler(0));
  });
  return seen;
}

}  // namespace

TEST_CASE("a background caller's job runs in the background, and the workers come back",
          "[workers]") {
  // Workers made by a thread at SCHED_BATCH are at SCHED_BATCH: their own class.
  std::unique_ptr<WorkerPool> pool;
  std::thread([&] {
    sched_param p{};
    REQUIRE(sched_setscheduler(0, SCHED_BATCH, &p) == 0);
    pool = std::make_unique<WorkerPool>(2);
  }).join();
  CHECK(worker_classes(*pool) == std::set<int>{SCHED_BATCH});

  std::set<int> in_background;
  std::thread([&] {
    sched_param p{};
    REQUIRE(sched_setscheduler(0, SCHED_IDLE, &p) == 0);  // this thread only; it then ends
    in_background = worker_classes(*pool);
  }).join();
  if (gcr::can_run_in_background()) {
    CHECK(in_background == std::set<int>{SCHED_IDLE});
  } else {  // a worker could not come back: it stays in its class
    CHECK(in_background == std::set<int>{SCHED_BATCH});
  }
  CHECK(worker_classes(*pool) == std::set<int>{SCHED_BATCH});
}

TEST_CASE("a BackgroundScope puts back the class its thread had", "[workers]") {
  std::thread([] {
    sched_param p{};
    REQUIRE(sched_setscheduler(0, SCHED_BATCH, &p) == 0);
    {
      gcr::BackgroundScope scope;
      scope.set(true);
      CHECK(scope.on() == gcr::can_run_in_background());
      CHECK(sched_getscheduler(0) == (scope.on() ? SCHED_IDLE : SCHED_BATCH));
      scope.set(false);
      CHECK(sched_getscheduler(0) == SCHED_BATCH);
      scope.set(true);
    }
    CHECK(sched_getscheduler(0) == SCHED_BATCH);
    // A thread at SCHED_IDLE already stays there.
    REQUIRE(sched_setscheduler(0, SCHED_IDLE, &p) == 0);
    {
      gcr::BackgroundScope scope;
      scope.set(true);
      CHECK_FALSE(scope.on());
    }
    CHECK(sched_getscheduler(0) == SCHED_IDLE);
  }).join();
}
