// FrozenThreads (daemon/tree_freeze.h): a bystander's ranks held still while a rank of their job
// moves (Note [A rank moved while its job runs] in daemon/job_move.h), on a child of the test's
// own with two threads counting in shared memory; and the requests that ask for a move.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "gcrd_requests.h"
#include "tree_freeze.h"

using namespace gcr;
using namespace gcr::gcrd;
using namespace std::chrono_literals;

namespace {

struct Counters {
  std::atomic<std::uint64_t> main{0}, worker{0};
};

// A child whose main thread and a second thread each count as fast as they can.
pid_t start_counting(Counters* c) {
  pid_t pid = ::fork();
  if (pid == 0) {
    std::thread([c] {
      for (;;) c->worker.fetch_add(1, std::memory_order_relaxed);
    }).detach();
    for (;;) c->main.fetch_add(1, std::memory_order_relaxed);
  }
  return pid;
}

bool moves(const std::atomic<std::uint64_t>& n) {
  const std::uint64_t before = n.load();
  for (int i = 0; i < 2000; ++i) {  // up to 2 s on a busy machine
    if (n.load() != before) return true;
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

}  // namespace

TEST_CASE("every thread is held still until thawed, and runs on after") {
  auto* c = static_cast<Counters*>(
      ::mmap(nullptr, sizeof(Counters), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  REQUIRE(c != MAP_FAILED);
  new (c) Counters;
  const pid_t child = start_counting(c);
  REQUIRE(child > 0);
  REQUIRE(moves(c->worker));  // both threads are running
  {
    auto frozen = FrozenThreads::freeze({child});
    REQUIRE(frozen);
    CHECK(frozen->threads() == 2);
    const std::uint64_t m = c->main.load(), w = c->worker.load();
    std::this_thread::sleep_for(50ms);
    CHECK(c->main.load() == m);
    CHECK(c->worker.load() == w);
    frozen->thaw();
    CHECK(moves(c->main));
    CHECK(moves(c->worker));
    // Holding again, then dropping the holder without a thaw: its destructor lets go.
    auto again = FrozenThreads::freeze({child});
    REQUIRE(again);
  }
  CHECK(moves(c->main));
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::munmap(c, sizeof(Counters));
}

TEST_CASE("a process that is gone is refused by nothing and holds nothing") {
  auto frozen = FrozenThreads::freeze({999'999'999});
  REQUIRE(frozen);
  CHECK(frozen->threads() == 0);
}

TEST_CASE("a move is a round or the stop of one rank, with the rest of its job remote") {
  Fields base{{"pid", "100"},
              {"move", "1"},
              {"remote.0", "10.0.0.1:7070"},
              {"remote_pids.0", "200"},
              {"net_key", "secret"}};
  auto round = base;
  round["leave_running"] = "1";
  CHECK(decode_checkpoint(round));
  auto stop = base;
  stop["hold"] = "1";
  auto s = decode_checkpoint(stop);
  REQUIRE(s);
  CHECK(s->move);
  CHECK_FALSE(decode_checkpoint(base));  // neither a round nor the stop
  auto alone = round;
  alone.erase("remote.0");
  alone.erase("remote_pids.0");
  CHECK_FALSE(decode_checkpoint(alone));  // no job to stand by
  auto named = round;
  named["tag"] = "x";
  CHECK_FALSE(decode_checkpoint(named));
  auto held = stop;
  held.erase("move");
  CHECK_FALSE(decode_checkpoint(held));  // a job across hosts is not held, unless a rank moves
  CHECK_FALSE(decode_job_part({{"pids", "5"}, {"freeze", "1"}}));  // only a bystander freezes
  auto by = decode_job_part({{"pids", "5,6"}, {"bystander", "1"}, {"freeze", "1"}});
  REQUIRE(by);
  CHECK(by->bystander);
  CHECK(by->freeze);
}
