// Killed writers: a writer process SIGKILLed at a random moment never harms a committed
// checkpoint, and never leaves a half checkpoint visible; gc then removes what it left behind.
#include <random>

#include "itest_util.h"

using namespace gcr::store;
using namespace gcr::store::itest;

TEST_CASE("a writer killed at any moment leaves every committed checkpoint intact", "[crash]") {
  ScratchDir dir;
  auto root = dir.path() / "store";
  auto scratch = dir.path() / "scratch";
  // A first checkpoint, written to completion, also times a whole run.
  auto t0 = std::chrono::steady_clock::now();
  auto first = run_writer({"write", root, "1", "2048", scratch});
  auto run_time =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
  REQUIRE(first.exited);
  REQUIRE(first.code == 0);
  std::string parent = first.out.substr(0, 32);

  std::mt19937_64 rng(std::random_device{}());
  std::size_t committed = 1, killed = 0;
  for (int i = 0; i < 20; ++i) {
    auto delay = std::chrono::microseconds(rng() % (run_time.count() * 6 / 5 + 1));
    auto r =
        run_writer({"write", root, std::to_string(100 + i), "2048", scratch, parent}, {}, delay);
    INFO("iteration " << i << ", killed after " << delay.count() << " us");
    if (r.killed) {
      ++killed;
    } else {
      REQUIRE(r.exited);
      REQUIRE(r.code == 0);
      ++committed;
    }
    // Committed checkpoints only, all intact; a killed writer's may or may not have committed.
    std::size_t n = check_store(root);
    CHECK(n >= committed);
    CHECK(n <= committed + killed);
  }
  WARN(killed << " of 20 writers killed mid-way (run time " << run_time.count() << " us)");
  check_clean_after_gc(root);
  check_store(root);
}
