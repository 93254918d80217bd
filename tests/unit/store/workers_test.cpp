// WorkerPool: every index runs exactly once, from several callers at once.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "store/workers.h"

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
