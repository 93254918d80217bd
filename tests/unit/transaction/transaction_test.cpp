// The checkpoint as a transaction (daemon/checkpoint_txn.h, Note [Checkpoint phases]) on
// a fake world (fake_world.h): in every mode, a failure injected at each call the checkpoint
// makes ends with every process running with its memory, no keeper holding and nothing
// committed; a timeout likewise; the undos run in the reverse order of the phases; and the
// two-phase commit that jobs across hosts build on, on fakes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "fake_world.h"
#include "transaction.h"

using namespace gcr;
using namespace gcr::gcrd;
using namespace gcr::gcrd::test;

namespace {

// The calls of a successful run that a fake can fail, each once, in order.
std::vector<std::string> injectable_calls(const Config& config) {
  static const std::vector<std::string> silent = {"end_cut",   "cow_end",   "keepers",
                                                  "continue_", "end_trees", "criu_cancel",
                                                  "store_rem", "hold",      "lineage"};
  World w(config);
  REQUIRE(w.checkpoint());
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const std::string& c : w.calls) {
    bool skip = false;
    for (const std::string& s : silent) skip |= c.rfind(s, 0) == 0;
    if (!skip && seen.insert(c).second) out.push_back(c);
  }
  return out;
}

// What a successful checkpoint leaves.
void check_succeeded(World& w, std::size_t before) {
  CHECK(w.committed() == before + 1);
  for (const FakeProcess& p : w.procs) {
    INFO("process " << p.pid);
    CHECK(p.keeper != FakeProcess::Keeper::holding);
    CHECK_FALSE(p.session_open);
    CHECK_FALSE(p.cow_active);
    const bool ends = !w.config.leave_running &&
                      !(w.config.external && w.config.runtime_keeps_running) &&
                      !(w.config.hold && !*w.config.hold);
    if (ends) {
      CHECK_FALSE(p.alive);
    } else {
      CHECK(p.alive);
      CHECK(p.gate_open);
      CHECK_FALSE(p.memory_parked);
      CHECK_FALSE(p.stopped);
    }
  }
}

std::vector<std::byte> stored_region(store::Store& store, const std::string& id,
                                     std::uint64_t address, const std::string& owner = "") {
  auto cid = store.resolve(id);
  REQUIRE(cid);
  auto reader = store.open_checkpoint(*cid);
  REQUIRE(reader);
  for (const store::ObjectEntry& o : (*reader)->manifest().objects)
    if (o.kind == store::ObjectKind::device_region && o.address == address && o.name == owner) {
      std::vector<std::byte> out(o.size);
      REQUIRE((*reader)->read(o, 0, out));
      return out;
    }
  FAIL("no region " << address << " in checkpoint " << id);
  return {};
}

Config stopping() {
  Config c;
  c.leave_running = false;
  return c;
}

struct Mode {
  const char* name;
  Config config;
};

std::vector<Mode> modes() {
  std::vector<Mode> out;
  Config c;
  out.push_back({"one process, --leave-running", c});
  c.leave_running = false;
  out.push_back({"one process, ended after the commit", c});
  c = Config{};
  c.members = 2;
  c.share = true;
  out.push_back({"a job of two members sharing memory, --leave-running", c});
  c.leave_running = false;
  out.push_back({"a job of two members sharing memory, ended", c});
  c = Config{};
  c.members = 2;
  c.several_trees = true;
  out.push_back({"a job of two trees (--job), --leave-running", c});
  c.leave_running = false;
  out.push_back({"a job of two trees (--job), ended", c});
  c = Config{};
  c.leave_running = false;
  c.external = true;
  out.push_back({"a container runtime's CRIU that ends the process", c});
  c.runtime_keeps_running = true;
  out.push_back({"a container runtime's CRIU that leaves it running", c});
  c = Config{};
  c.device_only = true;
  out.push_back({"a device-only pre-copy round", c});
  c = Config{};
  c.leave_running = false;
  c.hold = true;
  out.push_back({"a migration's hold, handed over", c});
  c.hold = false;
  out.push_back({"a migration's hold, refused by the destination", c});
  return out;
}

}  // namespace

TEST_CASE("Transaction: undos run in reverse, once; commit keeps what was done") {
  std::vector<std::string> log;
  {
    Transaction tx("a test");
    REQUIRE(tx.run("one", [&] {
      tx.on_undo("a", [&] { log.push_back("undo a"); });
      return ok();
    }));
    REQUIRE(tx.run("two", [&] {
      tx.on_undo("b", [&] { log.push_back("undo b"); });
      tx.on_undo("c", [&] { log.push_back("undo c"); });
      return ok();
    }));
    CHECK(tx.forget_undo("c") == 1);
    Status s = tx.run("three", [&]() -> Status {
      tx.on_undo("d", [&] { log.push_back("undo d"); });
      return Error{Errc::io_error, "three failed"};
    });
    REQUIRE_FALSE(s);
    CHECK(s.error().message == "three failed");
    CHECK(log == std::vector<std::string>{"undo d", "undo b", "undo a"});
    CHECK(tx.finished());
    CHECK_FALSE(tx.run("four", [] { return ok(); }));  // nothing after the end
    tx.abort();                                        // once
    CHECK(log.size() == 3);
    CHECK(tx.journal().front() == "begin one");
  }
  log.clear();
  {
    Transaction tx("a test");
    REQUIRE(tx.run("one", [&] {
      tx.on_undo("a", [&] { log.push_back("undo a"); });
      return ok();
    }));
    tx.commit();
  }
  CHECK(log.empty());
  {
    Transaction tx("a test");
    REQUIRE(tx.run("one", [&] {
      tx.on_undo("a", [&] { log.push_back("undo a"); });
      return ok();
    }));
  }  // neither committed nor aborted: an early return
  CHECK(log == std::vector<std::string>{"undo a"});
}

TEST_CASE("Transaction: a transaction past its limit fails before its next phase") {
  auto now = Transaction::Clock::time_point{};
  std::vector<std::string> log;
  Transaction tx("a test", std::chrono::seconds(10), [&] { return now; });
  REQUIRE(tx.run("one", [&] {
    tx.on_undo("a", [&] { log.push_back("undo a"); });
    now += std::chrono::seconds(11);
    return ok();
  }));
  CHECK(tx.time_left() == Transaction::Clock::duration::zero());
  bool ran = false;
  Status s = tx.run("two", [&] {
    ran = true;
    return ok();
  });
  REQUIRE_FALSE(s);
  CHECK(s.error().code == Errc::timeout);
  CHECK_FALSE(ran);
  CHECK(log == std::vector<std::string>{"undo a"});
}

TEST_CASE("TwoPhaseCommit: prepare all, then commit all, or abort all") {
  std::vector<std::string> log;
  FakeParticipant a("a", log), b("b", log), c("c", log);
  SECTION("every part prepares: every part commits") {
    TwoPhaseCommit tpc;
    tpc.add(a);
    tpc.add(b);
    tpc.add(c);
    REQUIRE(tpc.run());
    CHECK(log == std::vector<std::string>{"a prepare", "b prepare", "c prepare", "a commit",
                                          "b commit", "c commit"});
  }
  SECTION("a part that cannot prepare: every part asked is aborted, none commits") {
    b.fail_prepare = true;
    TwoPhaseCommit tpc;
    tpc.add(a);
    tpc.add(b);
    tpc.add(c);
    Status s = tpc.run();
    REQUIRE_FALSE(s);
    CHECK(s.error().message.find("b could not prepare") != std::string::npos);
    CHECK(log == std::vector<std::string>{"a prepare", "b prepare", "b abort", "a abort"});
  }
  SECTION("a part that cannot commit: the parts after it are aborted, those before stay") {
    b.fail_commit = true;
    TwoPhaseCommit tpc;
    tpc.add(a);
    tpc.add(b);
    tpc.add(c);
    Status s = tpc.run();
    REQUIRE_FALSE(s);
    CHECK(s.error().message.find("after a had committed") != std::string::npos);
    CHECK(log == std::vector<std::string>{"a prepare", "b prepare", "c prepare", "a commit",
                                          "b commit", "c abort"});
  }
}

TEST_CASE("Checkpoint transaction: every mode succeeds on the fake world") {
  for (const Mode& mode : modes()) {
    INFO(mode.name);
    World w(mode.config);
    Status s = w.checkpoint();
    if (mode.config.hold && !*mode.config.hold) {
      // The destination refused: the checkpoint stays, the process runs on with its memory.
      REQUIRE_FALSE(s);
      CHECK(s.error().message.find("did not finish") != std::string::npos);
      CHECK(s.error().message.find("runs on") != std::string::npos);
      CHECK(w.failed_state(1).empty());
      continue;
    }
    INFO((s ? std::string() : s.error().message));
    REQUIRE(s);
    check_succeeded(w, 0);
    // The stored device memory is the cut's, every region of every member once.
    const std::string id = w.transaction().report().id;
    for (const FakeProcess& p : w.procs)
      for (std::size_t r = 0; r < p.regions.size(); ++r) {
        if (mode.config.share && p.pid == 102 && r == 1) continue;  // a view, stored under 101's
        std::string owner = p.pid == 101 ? "" : "pid:" + std::to_string(p.pid);
        CHECK(stored_region(w.store(), id, p.regions[r].address, owner) == p.regions[r].bytes);
      }
  }
}

TEST_CASE("Checkpoint transaction: a failure at any call leaves every process running") {
  for (const Mode& mode : modes()) {
    if (mode.config.hold && !*mode.config.hold) continue;  // fails by design (above)
    const std::vector<std::string> calls = injectable_calls(mode.config);
    REQUIRE(calls.size() > 8);
    for (const std::string& call : calls) {
      INFO(mode.name << ": failing '" << call << "'");
      World w(mode.config);
      w.fail.insert(call);
      Status s = w.checkpoint();
      if (s) {
        // Only what the checkpoint can do without succeeds (the first-touch order).
        CHECK(call.rfind("touch_order", 0) == 0);
        check_succeeded(w, 0);
        continue;
      }
      INFO("error: " << s.error().message);
      if (mode.config.runtime_keeps_running && call.rfind("give_back", 0) == 0) {
        // The runtime's dump succeeded (the checkpoint stays); the process it left running did
        // not take its memory back at first: the undo gives it again (else its keeper would).
        CHECK(w.committed() == 1);
        CHECK(w.failed_state(1) == "");
        continue;
      }
      std::string journal;
      for (const std::string& line : w.transaction().transaction().journal())
        journal += line + "\n";
      INFO("journal:\n" << journal);
      CHECK(w.failed_state(0) == "");
      CHECK(w.transaction().transaction().phase() == "aborted");
    }
  }
}

TEST_CASE("Checkpoint transaction: the undos of a failed dump, in order") {
  World w(Config{});
  w.fail.insert("criu_dump");
  Status s = w.checkpoint();
  REQUIRE_FALSE(s);
  const auto& journal = w.transaction().transaction().journal();
  std::vector<std::string> undos;
  for (const std::string& line : journal)
    if (line.rfind("undo ", 0) == 0) undos.push_back(line);
  CHECK(undos == std::vector<std::string>{"undo the memory parked", "undo the members quiesced",
                                          "undo CRIU started",
                                          "undo the checkpoint begun in the store"});
  // The memory comes back over a new session (the old one closed before CRIU), then the keeper
  // lets go.
  auto at = std::find(w.calls.begin(), w.calls.end(), "criu_dump");
  REQUIRE(at != w.calls.end());
  CHECK(std::vector<std::string>(at + 1, w.calls.end()) ==
        std::vector<std::string>{"give_back 101", "keepers done"});
  CHECK(w.failed_state(0) == "");
}

TEST_CASE(
    "Checkpoint transaction: a member that does not take its memory back is left to its "
    "keeper") {
  World w(stopping());
  w.fail.insert("store_commit");
  w.fail.insert("give_back 101");
  Status s = w.checkpoint();
  REQUIRE_FALSE(s);
  CHECK(std::find(w.calls.begin(), w.calls.end(), "keepers abandoned") != w.calls.end());
  CHECK(w.procs[0].keeper == FakeProcess::Keeper::gave_back);
  CHECK(w.failed_state(0) == "");
}

TEST_CASE("Checkpoint transaction: a timeout between phases undoes what was done") {
  World w(Config{});
  w.limit = std::chrono::seconds(10);
  w.slow["park 101"] = std::chrono::seconds(20);
  Status s = w.checkpoint();
  REQUIRE_FALSE(s);
  CHECK(s.error().code == Errc::timeout);
  CHECK(s.error().message.find("before its hold phase") != std::string::npos);
  CHECK(w.failed_state(0) == "");
}

TEST_CASE(
    "Checkpoint transaction: soft copy-on-write stores the cut's bytes of a region the "
    "process writes at once") {
  World w(Config{});
  w.procs[0].writes_after_resume = true;
  w.procs[0].written.assign(w.procs[0].regions[0].bytes.size(), std::byte{0x5a});
  REQUIRE(w.checkpoint());
  CHECK(std::find(w.calls.begin(), w.calls.end(), "cow_take 101") != w.calls.end());
  CHECK(w.transaction().report().cow_copies == 1);
  const std::string id = w.transaction().report().id;
  CHECK(stored_region(w.store(), id, w.procs[0].regions[0].address) == w.procs[0].regions[0].bytes);
}

TEST_CASE(
    "Checkpoint transaction: an incremental checkpoint takes what was not written from its "
    "parent") {
  // The same processes twice; between the two, one region written and one not.
  World w(Config{});
  CheckpointTransaction& t1 = w.build(w.store());
  REQUIRE(t1.prepare());
  REQUIRE(t1.commit());
  auto parent = w.store().resolve(t1.report().id);
  REQUIRE(parent);
  for (FakeProcess& p : w.procs) p.session_open = true;
  w.procs[0].regions[1].dirty = false;
  w.parent = *parent;
  w.calls.clear();
  CheckpointTransaction& t2 = w.build(w.store());
  REQUIRE(t2.prepare());
  REQUIRE(t2.commit());
  CHECK(std::count(w.calls.begin(), w.calls.end(), "store_from_parent") == 1);
  CHECK(std::count(w.calls.begin(), w.calls.end(), "store_region") == 1);
  CHECK(stored_region(w.store(), t2.report().id, w.procs[0].regions[1].address) ==
        w.procs[0].regions[1].bytes);
}

TEST_CASE("Checkpoint transactions in a two-phase commit: all committed, or none") {
  SECTION("both prepare: both commit") {
    World a(Config{}), b(Config{});
    TwoPhaseCommit tpc;
    tpc.add(a.build(a.store()));
    tpc.add(b.build(a.store()));
    REQUIRE(tpc.run());
    CHECK(a.committed() == 2);
    check_succeeded(a, 1);
    check_succeeded(b, 1);
  }
  SECTION("one fails to prepare: the other, prepared, is undone") {
    World a(stopping()), b(stopping());
    b.fail.insert("criu_dump");
    TwoPhaseCommit tpc;
    tpc.add(a.build(a.store()));
    tpc.add(b.build(a.store()));
    REQUIRE_FALSE(tpc.run());
    CHECK(a.failed_state(0) == "");  // it was stopped by its dump: let go, memory back
    CHECK(b.failed_state(0) == "");
  }
  SECTION("one fails to commit: the one committed before it stays, the other is undone") {
    World a(Config{}), b(Config{});
    b.fail.insert("store_commit");
    TwoPhaseCommit tpc;
    tpc.add(a.build(a.store()));
    tpc.add(b.build(a.store()));
    Status s = tpc.run();
    REQUIRE_FALSE(s);
    CHECK(a.committed() == 1);
    check_succeeded(a, 0);
    CHECK(b.failed_state(1) == "");
  }
}
