// Quiesce and resume (interpose/gate.cpp, park.cpp): with threads launching in loops, quiesce
// closes the API gate and drains the GPU, the threads stop where they are, and resume lets them
// go on with nothing lost.
#include <thread>

#include "common.h"

namespace ipt {
namespace {

std::vector<std::uint64_t> counts(Child& child) {
  child.send("counts");
  auto line = child.read_until("counts");
  REQUIRE(line);
  std::vector<std::uint64_t> out;
  auto w = words(*line);
  for (std::size_t i = 1; i < w.size(); ++i) out.push_back(std::stoull(w[i]));
  return out;
}

bool all_advanced(const std::vector<std::uint64_t>& before,
                  const std::vector<std::uint64_t>& after) {
  for (std::size_t i = 0; i < before.size(); ++i)
    if (after[i] <= before[i]) return false;
  return true;
}

std::string text(const std::vector<std::uint64_t>& v) {
  std::string s;
  for (auto x : v) s += std::to_string(x) + " ";
  return s;
}

// Waits up to timeout_ms for every thread's counter to pass `before`.
bool advance_within(Child& child, const std::vector<std::uint64_t>& before, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (all_advanced(before, counts(child))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST_CASE("quiesce stops threads that launch in loops, and resume lets them go on", "[quiesce]") {
  constexpr int kThreads = 4;
  Child child = Child::mode({"threads", std::to_string(kThreads)}, gcr_env());
  REQUIRE(child.read_until("ready", 30000));
  auto start = counts(child);
  REQUIRE(start.size() == kThreads);
  REQUIRE(advance_within(child, start, 10000));  // they run

  control::Client client = connect(child.pid());
  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    REQUIRE(client.quiesce(std::chrono::seconds(10)));
    auto status = client.status();
    REQUIRE(status);
    CHECK(status->state == control::ProcessState::quiesced);
    // A call that was past the gate when it closed (a forwarded one: the trampolines only look
    // at the gate on entry) returns once the drain is done, and its thread counts it before it
    // blocks at its next call: wait until the counts hold still for 50 ms.
    auto stopped = counts(child);
    for (int i = 0; i < 40; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      auto again = counts(child);
      if (again == stopped) break;
      stopped = again;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto still = counts(child);
    INFO("at quiesce: " << text(stopped) << " 300 ms later: " << text(still));
    CHECK(still == stopped);

    REQUIRE(client.resume());
    status = client.status();
    REQUIRE(status);
    CHECK(status->state == control::ProcessState::running);
    CHECK(advance_within(child, still, 10000));
  }
  REQUIRE(client.close());

  // Every launch ran exactly once: each thread's buffer holds its count.
  child.send("stop");
  std::vector<std::string> lines;
  auto done = child.read_until("stopped", 30000, &lines);
  INFO("last line: " << (lines.empty() ? std::string() : lines.back()));
  CHECK(done == std::optional<std::string>("stopped ok"));
  CHECK(describe_status(child.wait()) == "exit 0");
}

TEST_CASE("a session that ends while the process is quiesced resumes it", "[quiesce]") {
  Child child = Child::mode({"threads", "2"}, gcr_env());
  REQUIRE(child.read_until("ready", 30000));
  {
    control::Client client = connect(child.pid());
    REQUIRE(client.quiesce(std::chrono::seconds(10)));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }  // dropped without resume
  auto after = counts(child);
  CHECK(advance_within(child, after, 10000));
  child.send("stop");
  CHECK(child.read_until("stopped", 30000) == std::optional<std::string>("stopped ok"));
  CHECK(describe_status(child.wait()) == "exit 0");
}

// Every driver call the program makes waits at the gate while the process is quiesced or parked,
// whether the interposer forwards it (a trampoline) or wraps it: a wrapped one that went through
// would find its memory parked (a spurious error), or add a region that unpark does not know.
TEST_CASE("calls of every kind wait while the process is quiesced or parked", "[quiesce]") {
  Child child = Child::mode({"gate"}, gcr_env());
  REQUIRE(child.read_until("ready", 30000));
  control::Client client = connect(child.pid());
  const std::pair<const char*, bool> calls[] = {
      {"memset", false}, {"memset", true},      {"attribute", false}, {"attribute", true},
      {"range", false},  {"range", true},       {"pool", false},      {"pool", true},
      {"map", false},    {"unmap", false},      {"map", true},        {"unmap", true},
      {"retain", true},  {"ctx-create", false}, {"ctx-destroy", true}};
  for (const auto& [call, park] : calls) {
    INFO(call << (park ? " while parked" : " while quiesced"));
    REQUIRE(client.quiesce(std::chrono::seconds(10)));
    std::vector<control::ParkedRegion> parked;
    if (park) {
      auto p = client.park();
      REQUIRE(p);
      parked = std::move(*p);
    }
    child.send(call);
    auto early = child.read_line(300);
    INFO("within 300 ms: " << early.value_or("nothing"));
    CHECK_FALSE(early.has_value());
    if (park) REQUIRE(client.unpark(parked));
    REQUIRE(client.resume());
    std::string line = early ? *early : child.read_line(10000).value_or("nothing");
    CHECK(line == std::string("returned ") + call + " CUDA_SUCCESS");
  }
  REQUIRE(client.close());
  child.send("exit");
  CHECK(describe_status(child.wait()) == "exit 0");
}

}  // namespace
}  // namespace ipt
