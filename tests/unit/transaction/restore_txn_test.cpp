// The restore as a transaction (daemon/restore_txn.h, Note [Restore phases]) on a fake world
// (restore_fake_world.h): in every mode a restore gives every process the checkpoint's bytes and
// lets it run; a failure injected at each call it makes, or its deadline passed before each phase,
// leaves no restored process alive (none ran on bytes it did not get), nothing allocated, loading,
// guarded, served or materialized, the stage as the Note says, and the checkpoint as it was; and
// what was done is undone in the order the Note gives.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "restore_fake_world.h"
#include "transaction.h"

using namespace gcr;
using namespace gcr::gcrd;
using namespace gcr::gcrd::test;

namespace {

using Lines = std::vector<std::string>;

struct Mode {
  const char* name;
  RestoreConfig config;
};

std::vector<Mode> modes() {
  std::vector<Mode> out;
  RestoreConfig c;
  out.push_back({"one process, on demand", c});
  c.eager = true;
  out.push_back({"one process, --eager", c});
  c = RestoreConfig{};
  c.lazy = true;
  out.push_back({"one process, host memory lazy, served by gcrd", c});
  c.host_from_store = false;
  out.push_back({"one process, host memory lazy, from CRIU's images", c});
  c = RestoreConfig{};
  c.staged = true;
  out.push_back({"from a migration's staged memory", c});
  c = RestoreConfig{};
  c.stop_copy = true;
  out.push_back({"a --stop-copy image", c});
  c = RestoreConfig{};
  c.external = true;
  out.push_back({"a container runtime's CRIU", c});
  c = RestoreConfig{};
  c.members = 2;
  out.push_back({"a job of two members sharing memory, on demand", c});
  c.eager = true;
  out.push_back({"a job of two members sharing memory, --eager", c});
  c = RestoreConfig{};
  c.members = 2;
  c.several_trees = true;
  out.push_back({"a job of two trees", c});
  c = RestoreConfig{};
  c.pid_in_use = true;
  c.lazy = true;
  out.push_back({"its pid in use: a new PID namespace, host memory lazy", c});
  c = RestoreConfig{};
  c.members = 2;
  c.pid_in_use = true;
  out.push_back({"a job of two members, its pid in use: a new PID namespace", c});
  c = RestoreConfig{};
  c.arriving = true;
  c.relay = true;
  out.push_back({"an arriving checkpoint, a file handed over through a relay", c});
  return out;
}

bool starts(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

std::string text(const Lines& lines) {
  std::string out;
  for (const std::string& l : lines) out += "  " + l + "\n";
  return out;
}

// The calls of a successful restore that a fake can fail, each occurrence once, in order ("use",
// then "use@2").
Lines injectable_calls(const RestoreConfig& config) {
  static const Lines released = {"free",      "take_staged", "drop_staged", "load_stopped",
                                 "images_",   "keeper_done", "keeper_drop", "kill",
                                 "wait_gone", "drop ",       "lazy_killed", "host_stopped",
                                 "host_join", "lineage",     "interposer"};
  RestoreWorld w(config);
  Status s = w.restore();
  INFO((s ? std::string() : s.error().message));
  REQUIRE(s);
  Lines out;
  std::map<std::string, int> seen;
  for (const std::string& c : w.calls) {
    if (starts(c, "phase ") ||
        std::any_of(released.begin(), released.end(), [&](auto& r) { return starts(c, r); }))
      continue;
    const int k = ++seen[c];
    out.push_back(k == 1 ? c : c + "@" + std::to_string(k));
  }
  return out;
}

// Calls whose failure the restore does without: gcrd's server of host memory (CRIU's images hold
// the pages), the keeper's following CRIU (best effort, logged), cow_end after a complete load,
// and a job member's close.
bool tolerated(const std::string& call, const RestoreConfig& c) {
  return starts(call, "host_plan") || starts(call, "keeper_restoring_in") ||
         starts(call, "keeper_namespace") || starts(call, "cow_end") ||
         (c.members > 1 && starts(call, "close"));
}

Lines undos(const Lines& journal) {
  Lines out;
  for (const std::string& line : journal)
    if (starts(line, "undo ")) out.push_back(line);
  return out;
}

Lines phases(const Lines& journal) {
  Lines out;
  for (const std::string& line : journal)
    if (starts(line, "begin ")) out.push_back(line.substr(6));
  return out;
}

// What the world did after the call named `call` (its first occurrence), in order.
Lines after(const Lines& calls, const std::string& call) {
  auto at = std::find(calls.begin(), calls.end(), call);
  if (at == calls.end()) return {"(no call " + call + ")"};
  return Lines(at + 1, calls.end());
}

// After the transaction aborted (its one undo, the kill, done), what its members release as it is
// destroyed, in the order of Note [Restore phases]; nothing else. Empty when so.
std::string released_in_order(const Lines& calls) {
  static const std::vector<std::pair<std::string, int>> rank = {
      {"drop ", 1},       {"interposer ended", 1}, {"keeper_dropped", 2}, {"host_stopped", 3},
      {"lazy_killed", 4}, {"images_removed", 5},   {"load_stopped", 6},   {"free", 7}};
  auto at = std::find(calls.begin(), calls.end(), "phase aborted");
  if (at == calls.end()) return "it never aborted";
  int last = 0;
  for (auto it = at + 1; it != calls.end(); ++it) {
    int r = 0;
    for (const auto& [prefix, k] : rank)
      if (starts(*it, prefix)) r = k;
    if (r == 0) return "'" + *it + "' after the abort";
    if (r < last) return "'" + *it + "' after what the Note releases after it";
    last = r;
  }
  return "";
}

const Lines kKilled = {"undo the restored processes"};
constexpr std::uint64_t kRegionBytes = 64 * 1024;  // restore_fake_world.cpp's

}  // namespace

TEST_CASE("Restore transaction: every mode restores its processes on the checkpoint's bytes") {
  for (const Mode& mode : modes()) {
    INFO(mode.name);
    RestoreWorld w(mode.config);
    Status s = w.restore();
    INFO((s ? std::string() : s.error().message));
    INFO("calls:\n" << text(w.calls));
    REQUIRE(s);
    CHECK(w.restored_state() == "");
    REQUIRE(w.report);
    const RestoreReport& r = *w.report;
    CHECK(r.id == w.checkpoint.hex());
    CHECK(r.kind == (mode.config.stop_copy ? "stop-copy" : "gcr"));
    CHECK(r.pid == w.procs.front().pid);
    // Two regions a member, a view of a shared allocation stored once.
    const bool view = mode.config.members > 1 && !mode.config.several_trees;
    const std::uint64_t stored =
        mode.config.stop_copy ? 0 : mode.config.members * 2 - (view ? 1 : 0);
    CHECK(r.region_bytes == stored * kRegionBytes);
    CHECK(r.staged_bytes == (mode.config.staged ? kRegionBytes : 0));
    CHECK(r.lazy_host == (mode.config.lazy && !mode.config.eager));
    CHECK(r.host_from_store == (mode.config.lazy && mode.config.host_from_store));
    CHECK(r.new_pid_namespace == (mode.config.pid_in_use || mode.config.external));
    CHECK(r.tree_pids ==
          (mode.config.several_trees ? std::vector<pid_t>{2000} : std::vector<pid_t>{}));
    CHECK(undos(w.journal).empty());
    CHECK(w.journal.back() == "commit");
  }
}

TEST_CASE("Restore transaction: a failure at any call leaves nothing behind") {
  for (const Mode& mode : modes()) {
    const Lines calls = injectable_calls(mode.config);
    REQUIRE(calls.size() >= 7);  // a --stop-copy image's are the fewest
    for (const std::string& call : calls) {
      INFO(mode.name << ": failing '" << call << "'");
      RestoreWorld w(mode.config);
      w.fail.insert(call);
      Status s = w.restore();
      INFO("journal:\n" << text(w.journal) << "calls:\n" << text(w.calls));
      CHECK(w.fail.empty());  // the call was made, and failed
      if (s) {
        CHECK(tolerated(call, mode.config));
        CHECK(w.restored_state() == "");
        continue;
      }
      INFO("error: " << s.error().message);
      CHECK_FALSE(tolerated(call, mode.config));
      CHECK(w.failed_state() == "");
      CHECK(released_in_order(w.calls) == "");
      // Only what CRIU restored has an undo of its own (the rest goes with its owner).
      CHECK(undos(w.journal) == (w.procs.empty() ? Lines{} : kKilled));
      if (!w.procs.empty()) CHECK(s.error().message.find("; killed it: ") != std::string::npos);
    }
  }
}

TEST_CASE("Restore transaction: past its deadline, it undoes what was done before the next phase") {
  for (const Mode& mode : modes()) {
    Lines all;
    {
      RestoreWorld w(mode.config);
      REQUIRE(w.restore());
      all = phases(w.journal);
    }
    // The first clock read is the transaction's start; the next, the check before phase 0.
    for (std::size_t phase = 0; phase < all.size(); ++phase) {
      INFO(mode.name << ": past the deadline before " << all[phase]);
      RestoreWorld w(mode.config);
      w.limit = std::chrono::seconds(10);
      w.past_deadline_at = static_cast<int>(phase) + 2;
      Status s = w.restore();
      INFO("journal:\n" << text(w.journal));
      REQUIRE_FALSE(s);
      CHECK(s.error().code == Errc::timeout);
      CHECK(s.error().message.find("before its " + all[phase] + " phase") != std::string::npos);
      CHECK(phases(w.journal) == Lines(all.begin(), all.begin() + static_cast<long>(phase)));
      CHECK(w.failed_state() == "");
      CHECK(released_in_order(w.calls) == "");
      const bool restored = std::find(all.begin(), all.begin() + static_cast<long>(phase),
                                      "criu") != all.begin() + static_cast<long>(phase);
      CHECK(undos(w.journal) == (restored ? kKilled : Lines{}));
    }
  }
}

TEST_CASE("Restore transaction: the undos of a failed load, in order (Note [Restore phases])") {
  SECTION("on demand: killed (the undo), then its session ends, the images, the load, the memory") {
    RestoreWorld w(RestoreConfig{});
    w.fail.insert("load_wait");
    REQUIRE_FALSE(w.restore());
    CHECK(after(w.calls, "load_wait") == Lines{"kill 1000", "wait_gone 1000", "phase aborted",
                                               "drop 1000", "images_removed", "load_stopped",
                                               "free", "free"});
    CHECK(undos(w.journal) == kKilled);
    CHECK(w.failed_state() == "");
  }
  SECTION("host memory served by gcrd: its server hangs up before CRIU's daemon is reaped") {
    RestoreConfig c;
    c.lazy = true;
    RestoreWorld w(c);
    w.fail.insert("load_wait");
    REQUIRE_FALSE(w.restore());
    CHECK(after(w.calls, "load_wait") ==
          Lines{"kill_tree 1000", "wait_gone 1000", "phase aborted", "drop 1000", "keeper_dropped",
                "host_stopped", "lazy_killed", "images_removed", "load_stopped", "free", "free"});
    CHECK(w.failed_state() == "");
  }
  SECTION("its deadline passed while it resumed: the same, before the load phase") {
    RestoreWorld w(RestoreConfig{});
    w.limit = std::chrono::seconds(10);
    w.slow["resume 1000"] = std::chrono::seconds(20);
    Status s = w.restore();
    REQUIRE_FALSE(s);
    CHECK(s.error().code == Errc::timeout);
    CHECK(after(w.calls, "resume 1000") == Lines{"keeper_done", "kill 1000", "wait_gone 1000",
                                                 "phase aborted", "drop 1000", "images_removed",
                                                 "load_stopped", "free", "free"});
    CHECK(w.failed_state() == "");
  }
}

TEST_CASE("Restore transaction: the undos of a failed CRIU, in order") {
  SECTION("no process: its keeper lets go, then the images, the load and the memory go") {
    RestoreWorld w(RestoreConfig{});
    w.fail.insert("criu_restore");
    REQUIRE_FALSE(w.restore());
    CHECK(after(w.calls, "criu_restore") ==
          Lines{"keeper_done", "phase aborted", "images_removed", "load_stopped", "free", "free"});
    CHECK(undos(w.journal).empty());
    CHECK(w.procs.empty());
    CHECK(w.failed_state() == "");
  }
  SECTION("a page gcrd cannot serve ends CRIU's restore, and says so") {
    RestoreConfig c;
    c.lazy = true;
    RestoreWorld w(c);
    w.fail.insert("serve_page");
    Status s = w.restore();
    REQUIRE_FALSE(s);
    CHECK(s.error().code == Errc::corrupt_image);
    CHECK(s.error().message.find("the restore was ended") != std::string::npos);
    CHECK(w.failed_state() == "");
  }
  SECTION("a job's second tree: the first is killed, every keeper lets go") {
    RestoreConfig c;
    c.members = 2;
    c.several_trees = true;
    RestoreWorld w(c);
    w.fail.insert("keeper_restored");  // the second tree's: the first's is told after
    REQUIRE_FALSE(w.restore());
    CHECK(after(w.calls, "keeper_restored") ==
          Lines{"keeper_done", "kill_tree 2000", "wait_gone 2000", "kill_tree 1000",
                "wait_gone 1000", "phase aborted", "keeper_dropped", "images_removed",
                "load_stopped", "free", "free", "free", "free"});
    CHECK(undos(w.journal) == kKilled);
    CHECK(w.failed_state() == "");
  }
}

TEST_CASE(
    "Restore transaction: a job member that cannot be unparked: the sessions opened end, then the "
    "job is killed") {
  RestoreConfig c;
  c.members = 2;
  RestoreWorld w(c);
  w.fail.insert("unpark 1001");
  REQUIRE_FALSE(w.restore());
  // Each member waits for loads in its table: the end of its session ends it (op_cow_end).
  CHECK(after(w.calls, "unpark 1001") ==
        Lines{"drop 1001", "interposer ended 1001", "drop 1000", "interposer ended 1000",
              "kill_tree 1000", "wait_gone 1000", "phase aborted", "keeper_dropped",
              "images_removed", "load_stopped", "free", "free", "free"});
  CHECK(w.failed_state() == "");
}

TEST_CASE(
    "Restore transaction: staged memory is the restore's once taken (Note [Staged restore])") {
  RestoreConfig c;
  c.staged = true;
  SECTION("a failure before the stage is dropped: what was taken is freed, the rest stays") {
    RestoreWorld w(c);
    w.fail.insert("allocate");
    REQUIRE_FALSE(w.restore());
    CHECK(after(w.calls, "allocate") == Lines{"phase aborted", "free"});
    CHECK(w.staged.size() == 1);
    CHECK(w.failed_state() == "");
  }
  SECTION("a failure after: nothing staged is left, nothing allocated") {
    RestoreWorld w(c);
    w.fail.insert("criu_restore");
    REQUIRE_FALSE(w.restore());
    CHECK(w.staged.empty());
    CHECK(w.allocations == 0);
    CHECK(w.failed_state() == "");
  }
  SECTION("a restore takes what is current, loads the rest, and drops what it did not take") {
    RestoreWorld w(c);
    REQUIRE(w.restore());
    CHECK(std::count(w.calls.begin(), w.calls.end(), "take_staged") == 1);
    CHECK(std::count(w.calls.begin(), w.calls.end(), "allocate") == 1);
    CHECK(w.restored_state() == "");
  }
}
