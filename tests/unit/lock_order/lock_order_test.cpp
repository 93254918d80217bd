// The interposer's lock-order check (Note [Lock order] in interpose/locks.h), in children: each
// case runs in a forked child whose stderr comes back through a pipe.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <functional>
#include <string>

#include "locks.h"

using gcr::interpose::LockRank;
using gcr::interpose::MutexLock;
using gcr::interpose::RankedMutex;

namespace {

struct Outcome {
  int status = 0;
  std::string stderr_text;
};

// `abort`: as the interposer's configuration sets it for GCR_LOCK_ORDER=abort.
Outcome in_child(bool abort, const std::function<void()>& body) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[0]);
    gcr::interpose::lock_order_abort_on_violation(abort);
    body();
    ::_exit(0);
  }
  ::close(fds[1]);
  Outcome out;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.stderr_text.append(buf, n);
  ::close(fds[0]);
  REQUIRE(::waitpid(pid, &out.status, 0) == pid);
  return out;
}

void regions_then_host(RankedMutex& regions, RankedMutex& host) {
  MutexLock a(regions);
  MutexLock b(host);
}

}  // namespace

TEST_CASE("locks taken in the written order pass silently") {
  Outcome o = in_child(true, [] {
    RankedMutex regions{LockRank::regions}, host{LockRank::host_memory};
    regions_then_host(regions, host);
    MutexLock again(host);  // after the pair is released, any order
  });
  CHECK(WIFEXITED(o.status));
  CHECK(WEXITSTATUS(o.status) == 0);
  CHECK(o.stderr_text.empty());
}

TEST_CASE("a lock taken against the order is reported once, naming both, and runs on") {
  Outcome o = in_child(false, [] {
    RankedMutex regions{LockRank::regions}, host{LockRank::host_memory};
    for (int i = 0; i < 3; ++i) {
      MutexLock a(host);
      MutexLock b(regions);
    }
  });
  CHECK(WIFEXITED(o.status));
  CHECK(o.stderr_text.find("took 'regions' while holding 'host_memory'") != std::string::npos);
  CHECK(o.stderr_text.find("took", o.stderr_text.find("took") + 1) == std::string::npos);
}

TEST_CASE("under GCR_LOCK_ORDER=abort a lock against the order aborts") {
  Outcome o = in_child(true, [] {
    RankedMutex start{LockRank::agent_start}, regions{LockRank::regions};
    MutexLock a(regions);
    MutexLock b(start);
  });
  REQUIRE(WIFSIGNALED(o.status));
  CHECK(WTERMSIG(o.status) == SIGABRT);
  CHECK(o.stderr_text.find("took 'agent_start' while holding 'regions'") != std::string::npos);
}

TEST_CASE("two locks of one rank may not nest") {
  Outcome o = in_child(true, [] {
    RankedMutex one{LockRank::validation}, two{LockRank::validation};
    MutexLock a(one);
    MutexLock b(two);
  });
  CHECK(WIFSIGNALED(o.status));
}
