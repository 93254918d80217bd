// Client against a real Server in another process (libgcr/control/client.cpp, server.cpp,
// procfs.cpp): the whole path -- mailbox, session lock, rendezvous, both credential checks -- and
// the errors a user sees when something is wrong.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "control/mailbox.h"
#include "fake_handler.h"
#include "gcr/control.h"

using namespace gcr;
using namespace gcr::control;
using namespace std::chrono_literals;
using gcr::control::testing::FakeHandler;
using gcr::control::testing::FakeTarget;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

Client connect_or_fail(pid_t pid, std::chrono::milliseconds timeout = 5s) {
  auto c = Client::connect(pid, timeout);
  if (!c) FAIL(c.error().message);
  return std::move(*c);
}

// Runs `body` in a child process as uid/gid 65534 and returns the error message it reports
// through a pipe ("" if the body succeeded).
std::string as_nobody(const std::function<std::string()>& body) {
  int p[2];
  REQUIRE(pipe2(p, O_CLOEXEC) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(p[0]);
    if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    std::string result = body();
    if (write(p[1], result.data(), result.size()) < 0) _exit(3);
    _exit(0);
  }
  ::close(p[1]);
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = read(p[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  ::close(p[0]);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  return out;
}

}  // namespace

TEST_CASE("a caller connects, reads status and regions, and leaves the process no socket",
          "[client]") {
  FakeTarget target(3);
  Client c = connect_or_fail(target.pid());
  CHECK(c.pid() == target.pid());
  CHECK(c.server().state == ProcessState::running);
  CHECK(c.server().software == "gcr");
  CHECK(testing::count_sockets(target.pid()) == 1);  // the session

  auto s = c.status();
  REQUIRE(s);
  CHECK(s->state == ProcessState::running);
  CHECK(s->regions == 3);
  CHECK(s->region_bytes == 3 * 4096);
  CHECK(s->dirty_bytes == 2 * 4096);

  auto r = c.regions();
  REQUIRE(r);
  REQUIRE(r->size() == 3);
  CHECK((*r)[1] == FakeHandler::record(1, 4096));

  REQUIRE(c.close());
  CHECK(testing::count_sockets(target.pid()) == 0);  // CRIU could dump it now
  CHECK(c.close());                                  // idempotent
  auto after = c.status();
  REQUIRE_FALSE(after);
  CHECK(contains(after.error().message, "closed"));
}

TEST_CASE("quiesce and resume change the process's state", "[client]") {
  FakeTarget target(1);
  Client c = connect_or_fail(target.pid());
  REQUIRE(c.quiesce(1s));
  CHECK(c.status()->state == ProcessState::quiesced);
  REQUIRE(c.resume());
  CHECK(c.status()->state == ProcessState::running);
  CHECK(c.close());
}

TEST_CASE("park hands over every region's fd and unpark gives them back", "[client]") {
  FakeTarget target(300);  // more than one batch of 250
  Client c = connect_or_fail(target.pid());
  REQUIRE(c.quiesce(1s));
  auto parked = c.park();
  REQUIRE(parked);
  REQUIRE(parked->size() == 300);
  for (int i : {0, 1, 249, 250, 299}) {
    CHECK((*parked)[i].region == FakeHandler::record(i, 4096));
    CHECK(testing::read_fd((*parked)[i].fd.get(), 4096) == FakeHandler::pattern(i, 4096));
  }
  CHECK(c.status()->state == ProcessState::parked);

  // The caller hangs up between park and unpark (CRIU dumps the process then)...
  REQUIRE(c.close());
  CHECK(testing::count_sockets(target.pid()) == 0);

  // ...changes what the memory holds, and a new caller gives it back.
  for (int i : {0, 299}) REQUIRE(pwrite((*parked)[i].fd.get(), "NEW!", 4, 0) == 4);
  Client again = connect_or_fail(target.pid());
  CHECK(again.server().state == ProcessState::parked);
  REQUIRE(again.unpark(*parked));
  CHECK(again.status()->state == ProcessState::quiesced);
  REQUIRE(again.resume());

  // The process holds the very files it was given: park once more and look.
  REQUIRE(again.quiesce(1s));
  auto second = again.park();
  REQUIRE(second);
  CHECK(testing::read_fd((*second)[0].fd.get(), 4) == "NEW!");
  CHECK(testing::read_fd((*second)[299].fd.get(), 4) == "NEW!");
  CHECK(testing::read_fd((*second)[1].fd.get(), 9) == "region-1;");
  REQUIRE(again.unpark(*second));
  REQUIRE(again.resume());
  CHECK(again.close());
}

TEST_CASE("the process's refusal reaches the caller, and the session goes on", "[client]") {
  FakeTarget target(2);
  Client c = connect_or_fail(target.pid());
  auto parked = c.park();  // not quiesced
  REQUIRE_FALSE(parked);
  CHECK(parked.error().code == Errc::invalid_argument);
  CHECK(contains(parked.error().message, "process " + std::to_string(target.pid()) + ": park: "));
  CHECK(contains(parked.error().message, "send quiesce first"));
  CHECK(c.status());

  auto wrong = c.unpark({});  // not parked
  REQUIRE_FALSE(wrong);
  CHECK(contains(wrong.error().message, "not parked"));
  CHECK(c.close());
}

TEST_CASE("new_epoch records the checkpoint id; an invalid id never leaves the caller",
          "[client]") {
  FakeTarget target(2);
  Client c = connect_or_fail(target.pid());
  REQUIRE(c.new_epoch("3f2a0b1c"));
  auto s = c.status();
  REQUIRE(s);
  CHECK(s->epoch == 1);
  CHECK(s->last_checkpoint == "3f2a0b1c");
  CHECK(s->dirty_bytes == 0);
  auto bad = c.new_epoch("a b");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code == Errc::invalid_argument);
  CHECK(c.status());  // the connection is still fine
}

TEST_CASE("a caller that disappears while the process is quiesced gets it resumed", "[client]") {
  FakeTarget target(1);
  {
    Client c = connect_or_fail(target.pid());
    REQUIRE(c.quiesce(1s));
  }  // dropped without close()
  Client next = connect_or_fail(target.pid());
  CHECK(next.status()->state == ProcessState::running);
}

TEST_CASE("a process without a mailbox is told to run under gcr", "[client]") {
  auto c = Client::connect(getpid(), 1s);
  REQUIRE_FALSE(c);
  CHECK(c.error().code == Errc::not_found);
  CHECK(contains(c.error().message, "is not running under gcr (no gcr-control mailbox)"));
  CHECK(contains(c.error().message, "gcr run"));
}

TEST_CASE("a pid with no process, and an invalid pid, are reported as such", "[client]") {
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(0);
  REQUIRE(waitpid(child, nullptr, 0) == child);
  auto c = Client::connect(child, 1s);
  REQUIRE_FALSE(c);
  CHECK(c.error().code == Errc::not_found);
  CHECK(contains(c.error().message, "no process with pid " + std::to_string(child)));

  auto bad = Client::connect(0, 1s);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code == Errc::invalid_argument);
}

TEST_CASE("a target that has exited is reported, not waited for", "[client]") {
  FakeTarget target(1);
  target.kill_now();  // a zombie now
  auto c = Client::connect(target.pid(), 30s);
  REQUIRE_FALSE(c);
  CHECK(c.error().code == Errc::not_found);
  CHECK(contains(c.error().message, "has exited"));
}

TEST_CASE("a target that dies during the rendezvous is reported as exited, not as a timeout",
          "[client]") {
  FakeTarget target(1, {}, /*serve=*/false);
  auto mailbox = open_mailbox(target.pid());
  REQUIRE(mailbox);
  std::thread killer([&] {
    std::this_thread::sleep_for(300ms);
    target.kill_now();
  });
  auto start = std::chrono::steady_clock::now();
  auto c = Client::connect_mailbox(target.pid(), std::move(*mailbox), 60s);
  auto waited = std::chrono::steady_clock::now() - start;
  killer.join();
  REQUIRE_FALSE(c);
  CHECK(c.error().code == Errc::not_found);
  CHECK(contains(c.error().message, "exited before answering"));
  CHECK(waited < 30s);  // not a hang: far below the 60 s it was allowed
}

TEST_CASE("a target whose agent thread does not run times out with a clear message", "[client]") {
  FakeTarget target(1, {}, /*serve=*/false);
  auto c = Client::connect(target.pid(), 200ms);
  REQUIRE_FALSE(c);
  CHECK(c.error().code == Errc::timeout);
  CHECK(contains(c.error().message, "did not answer on its gcr-control mailbox within 200 ms"));

  kill(target.pid(), SIGSTOP);
  auto stopped = Client::connect(target.pid(), 200ms);
  REQUIRE_FALSE(stopped);
  CHECK(contains(stopped.error().message, "is stopped"));
  CHECK(contains(stopped.error().message, "kill -CONT"));
  kill(target.pid(), SIGCONT);
}

TEST_CASE("a target that dies in the middle of a request gives an error, not a hang", "[client]") {
  FakeTarget target(1, [](FakeHandler& h) { h.on_quiesce = [] { _exit(9); }; });
  Client c = connect_or_fail(target.pid());
  Status s = c.quiesce(1s);
  REQUIRE_FALSE(s);
  CHECK(s.error().code == Errc::io_error);
  CHECK(contains(s.error().message, "closed its control connection during quiesce"));
  CHECK_FALSE(c.status());  // the connection is gone for good
}

TEST_CASE("two callers at once are serialized by the session lock", "[client]") {
  FakeTarget target(1);
  Client first = connect_or_fail(target.pid());

  SECTION("a second caller that cannot wait is told who holds the process") {
    auto second = Client::connect(target.pid(), 100ms);
    REQUIRE_FALSE(second);
    CHECK(second.error().code == Errc::busy);
    CHECK(contains(second.error().message, "another gcr command (pid " + std::to_string(getpid())));
  }
  SECTION("a second caller that waits gets the process once the first has finished") {
    std::atomic<bool> first_closing{false};
    std::atomic<bool> second_before_first{false};
    std::string second_error;
    std::thread other([&] {
      auto second = Client::connect(target.pid(), 10s);
      if (!second) {
        second_error = second.error().message;
        return;
      }
      if (!first_closing) second_before_first = true;
      (void)second->close();
    });
    std::this_thread::sleep_for(200ms);
    REQUIRE(first.status());
    first_closing = true;
    REQUIRE(first.close());
    other.join();
    CHECK(second_error.empty());
    CHECK_FALSE(second_before_first);
  }
}

TEST_CASE("a caller running as another uid is refused with a clear error", "[client]") {
  if (geteuid() != 0) {
    WARN("skipped: needs root to run a caller as uid 65534");
    return;
  }
  FakeTarget target(1);  // runs as root
  pid_t pid = target.pid();

  SECTION("it may not even find the mailbox") {
    std::string err = as_nobody([pid] {
      auto c = Client::connect(pid, 2s);
      return c ? std::string() : c.error().message;
    });
    CHECK(contains(err, "permission denied: only root or the process owner may control pid " +
                            std::to_string(pid)));
  }
  SECTION("and given the mailbox, the process itself refuses it") {
    auto mailbox = open_mailbox(pid);
    REQUIRE(mailbox);
    int fd = mailbox->get();
    std::string err = as_nobody([pid, fd] {
      auto c = Client::connect_mailbox(pid, UniqueFd(dup(fd)), 5s);
      return c ? std::string() : errc_name(c.error().code) + std::string(": ") + c.error().message;
    });
    // The child's session lock sits on the open file description it shared with ours (flock
    // belongs to the description, not the process): closing ours releases it.
    mailbox->reset();
    CHECK(contains(err, "permission_denied"));
    CHECK(contains(err, "only root or the process owner (uid 0) may control this process"));
    CHECK(contains(err, "the caller runs as uid 65534"));
    Client root = connect_or_fail(pid);  // the process is unharmed
    CHECK(root.status());
  }
}

TEST_CASE("find_managed_processes lists processes with a mailbox", "[client]") {
  FakeTarget target(1);
  std::vector<pid_t> pids = find_managed_processes();
  CHECK(std::find(pids.begin(), pids.end(), target.pid()) != pids.end());
  CHECK(std::find(pids.begin(), pids.end(), getpid()) == pids.end());
  CHECK(std::is_sorted(pids.begin(), pids.end()));
}

TEST_CASE("a mailbox of another version is refused naming both versions", "[client]") {
  FakeTarget target(1);
  auto mailbox = open_mailbox(target.pid());
  REQUIRE(mailbox);
  auto map = MailboxMap::map(mailbox->get());
  REQUIRE(map);
  (*map)->major = 2;
  auto c = Client::connect(target.pid(), 1s);
  REQUIRE_FALSE(c);
  CHECK(c.error().code == Errc::unsupported);
  CHECK(contains(c.error().message, "version 2.0, this gcr speaks 1.0"));
  (*map)->major = kMailboxMajor;
  CHECK(Client::connect(target.pid(), 5s));
}

TEST_CASE("the mailbox cannot be resized by a caller", "[client]") {
  FakeTarget target(1);
  auto mailbox = open_mailbox(target.pid());
  REQUIRE(mailbox);
  CHECK(ftruncate(mailbox->get(), 0) != 0);  // sealed: a shrink would SIGBUS the process
  Client c = connect_or_fail(target.pid());
  CHECK(c.status());
}
