#include "timeline.h"

#include <catch2/catch.hpp>

using namespace gcr::trace;

namespace {

constexpr std::uint64_t ms = 1'000'000;

// Threads 100 and 101 belong to process 100, 7 and 8 to process 7.
gcr_sched_event ev(std::uint64_t t_ms, std::uint32_t tid, unsigned kind, unsigned state = 0) {
  return {t_ms * ms, tid, kind, state, tid >= 100 ? 100u : 7u};
}

// Thread 100 runs CUDA calls: it meets the closed gate at 10 ms, sleeps in it, is seized by CRIU
// at 25 ms and let go at 60 ms, and leaves the gate at 70 ms. Thread 101 (a driver thread)
// sleeps, and is traced 30-50 ms only.
TimelineInput checkpoint_input() {
  TimelineInput in;
  in.pid = 100;
  in.process_names[100] = "train";
  in.threads = {{100, "train"}, {101, "worker"}};
  in.begin_ns = 0;
  in.end_ns = 100 * ms;
  in.events = {ev(2, 101, GCR_EV_OFF_CPU, GCR_TASK_INTERRUPTIBLE),
               ev(10, 100, GCR_EV_GATE_IN),
               ev(11, 100, GCR_EV_OFF_CPU, GCR_TASK_INTERRUPTIBLE),
               ev(20, 100, GCR_EV_WAKEUP),
               ev(20, 100, GCR_EV_GATE_IN),  // its futex wait timed out: it waits again
               ev(21, 100, GCR_EV_ON_CPU),
               ev(25, 100, GCR_EV_OFF_CPU, GCR_TASK_TRACED),
               ev(29, 101, GCR_EV_WAKEUP),
               ev(30, 101, GCR_EV_ON_CPU),
               ev(30, 101, GCR_EV_OFF_CPU, GCR_TASK_TRACED),
               ev(50, 101, GCR_EV_ON_CPU),
               ev(51, 101, GCR_EV_OFF_CPU, GCR_TASK_INTERRUPTIBLE),
               ev(60, 100, GCR_EV_WAKEUP),
               ev(61, 100, GCR_EV_ON_CPU),
               ev(70, 100, GCR_EV_GATE_OUT),
               ev(150, 100, GCR_EV_OFF_CPU, GCR_TASK_INTERRUPTIBLE)};  // after the window
  in.spans = {{"total", 5 * ms, 90 * ms}, {"stall", 5 * ms, 75 * ms}, {"quiesce", 5 * ms, 15 * ms},
              {"park", 15 * ms, 22 * ms}, {"dump", 22 * ms, 62 * ms}, {"unpark", 62 * ms, 75 * ms},
              {"store", 75 * ms, 90 * ms}};
  return in;
}

std::uint64_t phase(const StallSummary& s, const std::string& name) {
  for (const auto& [n, ns] : s.phases)
    if (n == name) return ns;
  return 0;
}

}  // namespace

TEST_CASE("a thread's slices follow its scheduling events") {
  TimelineInput in = checkpoint_input();
  std::vector<Slice> slices = thread_slices(in);
  std::vector<std::pair<SliceKind, std::uint64_t>> main_thread;
  for (const Slice& s : slices)
    if (s.tid == 100 && s.kind != SliceKind::gate)
      main_thread.push_back({s.kind, (s.end_ns - s.start_ns) / ms});
  std::vector<std::pair<SliceKind, std::uint64_t>> expected = {
      {SliceKind::running, 11}, {SliceKind::sleeping, 9}, {SliceKind::runnable, 1},
      {SliceKind::running, 4},  {SliceKind::traced, 35},  {SliceKind::runnable, 1},
      {SliceKind::running, 39}};
  CHECK(main_thread == expected);
  int gates = 0;
  for (const Slice& s : slices)
    if (s.kind == SliceKind::gate) {
      ++gates;
      CHECK(s.tid == 100);
      CHECK(s.start_ns == 10 * ms);
      CHECK(s.end_ns == 70 * ms);
    }
  CHECK(gates == 1);
}

TEST_CASE("the stall is the longest time one thread was held, broken down by gcrd's phases") {
  TimelineInput in = checkpoint_input();
  StallSummary s = summarize(in, thread_slices(in));
  CHECK(s.tid == 100);
  CHECK(s.start_ns == 10 * ms);
  CHECK(s.stall_ns == 60 * ms);
  CHECK(s.frozen_ns == 35 * ms);
  CHECK(s.gate_ns == 60 * ms);
  CHECK(s.threads == 2);
  CHECK(phase(s, "quiesce") == 5 * ms);
  CHECK(phase(s, "park") == 7 * ms);
  CHECK(phase(s, "dump") == 40 * ms);
  CHECK(phase(s, "unpark") == 8 * ms);
  CHECK(phase(s, "store") == 0);
}

TEST_CASE("held intervals that touch merge; a thread never held adds nothing") {
  TimelineInput in;
  in.pid = 7;
  in.begin_ns = 0;
  in.end_ns = 100 * ms;
  // Traced 10-20 ms, then straight into the gate 20-35 ms: one held interval of 25 ms. A second
  // thread only sleeps.
  in.events = {ev(10, 7, GCR_EV_OFF_CPU, GCR_TASK_TRACED), ev(20, 7, GCR_EV_ON_CPU),
               ev(20, 7, GCR_EV_GATE_IN), ev(35, 7, GCR_EV_GATE_OUT),
               ev(40, 8, GCR_EV_OFF_CPU, GCR_TASK_INTERRUPTIBLE)};
  StallSummary s = summarize(in, thread_slices(in));
  CHECK(s.stall_ns == 25 * ms);
  CHECK(s.start_ns == 10 * ms);
  CHECK(s.frozen_ns == 10 * ms);
}

TEST_CASE("a thread first seen coming onto the CPU was off it since the trace began") {
  TimelineInput in;
  in.pid = 7;
  in.begin_ns = 5 * ms;
  in.end_ns = 50 * ms;
  in.events = {ev(1, 7, GCR_EV_OFF_CPU, GCR_TASK_TRACED),  // before the window: ignored
               ev(12, 7, GCR_EV_ON_CPU)};
  std::vector<Slice> slices = thread_slices(in);
  REQUIRE(slices.size() == 2);
  CHECK(slices[0].kind == SliceKind::off_cpu);
  CHECK(slices[0].start_ns == 5 * ms);
  CHECK(slices[1].kind == SliceKind::running);
  CHECK(slices[1].end_ns == 50 * ms);
  CHECK(summarize(in, slices).stall_ns == 0);
}

TEST_CASE("the trace file is Chrome trace JSON with every track named") {
  TimelineInput in = checkpoint_input();
  in.process_names[100] = "tr\"ain";
  auto slices = thread_slices(in);
  std::string json = chrome_trace_json(in, slices, summarize(in, slices));
  CHECK(json.rfind("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", 0) == 0);
  CHECK(json.find("\"name\":\"pid 100 (tr\\\"ain)\"") != std::string::npos);
  CHECK(json.find("\"name\":\"worker\"") != std::string::npos);
  // /proc names are bytes: one that is not UTF-8 still gives valid JSON (U+FFFD).
  in.threads[1].name = "w\xff";
  std::string bytes = chrome_trace_json(in, slices, summarize(in, slices));
  CHECK(bytes.find("\"name\":\"w\\ufffd\"") != std::string::npos);
  CHECK(json.find("\"name\":\"train 100: gcr gate\"") != std::string::npos);
  CHECK(json.find("\"name\":\"traced (CRIU)\"") != std::string::npos);
  CHECK(json.find("\"name\":\"app-visible stall (kernel)\",\"pid\":2147483632,\"tid\":2,"
                  "\"ts\":10000.000,\"dur\":60000.000") != std::string::npos);
  CHECK(json.find("\"stall_ns\":60000000") != std::string::npos);
  CHECK(json.back() == '\n');
}

TEST_CASE("a restore's trace: processes apart, and when the restored one was let go") {
  TimelineInput in;
  in.pid = 7;
  in.process_names[100] = "gcrd";
  in.begin_ns = 0;
  in.end_ns = 100 * ms;
  // gcrd (threads 100+) runs; CRIU holds the restored process (7) traced until 40 ms, then it
  // waits at the gate from 45 ms until 60 ms, and sleeps from 70 ms.
  in.events = {ev(10, 100, GCR_EV_ON_CPU), ev(20, 7, GCR_EV_OFF_CPU, GCR_TASK_TRACED),
               ev(40, 7, GCR_EV_ON_CPU),   ev(45, 7, GCR_EV_GATE_IN),
               ev(60, 7, GCR_EV_GATE_OUT), ev(70, 7, GCR_EV_OFF_CPU, GCR_TASK_INTERRUPTIBLE)};
  auto slices = thread_slices(in);
  CHECK(last_held_end(slices, 7) == 60 * ms);
  CHECK(last_held_end(slices, 100) == 0);
  std::string json = chrome_trace_json(in, slices, StallSummary{});
  CHECK(json.find("\"name\":\"pid 100 (gcrd)\"") != std::string::npos);
  CHECK(json.find("\"name\":\"pid 7\"") != std::string::npos);
  CHECK(json.find("\"name\":\"running\",\"pid\":100,\"tid\":100") != std::string::npos);
  CHECK(json.find("\"pid\":7,\"tid\":1073741831") != std::string::npos);  // 7's gate track
  CHECK(json.find("app-visible stall") == std::string::npos);
}

TEST_CASE("page faults and disk requests are counters beside the threads, and totals") {
  TimelineInput in = checkpoint_input();
  std::size_t sched_events = in.events.size();
  in.events.push_back(ev(12, 100, GCR_EV_FAULTS, GCR_FAULT_BATCH));
  in.events.push_back(ev(14, 100, GCR_EV_FAULTS, GCR_FAULT_BATCH));
  in.events.push_back(ev(40, 7, GCR_EV_FAULTS, GCR_FAULT_BATCH));
  in.events.push_back({15 * ms, 0, GCR_EV_IO_READ, 1 << 20, 0});
  in.events.push_back({16 * ms, 0, GCR_EV_IO_WRITE, 4096, 0});
  std::stable_sort(in.events.begin(), in.events.end(),
                   [](const auto& a, const auto& b) { return a.ts_ns < b.ts_ns; });
  auto slices = thread_slices(in);
  // The counters make no scheduling slices, and no thread 0.
  TimelineInput plain = checkpoint_input();
  CHECK(slices.size() == thread_slices(plain).size());
  for (const Slice& s : slices) CHECK(s.tid != 0);
  auto summary = summarize(in, slices);
  CHECK(summary.page_faults == 3 * GCR_FAULT_BATCH);
  CHECK(summary.disk_read_bytes == 1u << 20);
  CHECK(summary.disk_write_bytes == 4096);
  std::string json = chrome_trace_json(in, slices, summary);
  CHECK(json.find("\"name\":\"page faults per 10 ms\",\"pid\":100,\"ts\":10000.000,"
                  "\"args\":{\"faults\":128}") != std::string::npos);
  CHECK(json.find("\"name\":\"page faults per 10 ms\",\"pid\":100,\"ts\":20000.000,"
                  "\"args\":{\"faults\":0}") != std::string::npos);  // back to zero after
  CHECK(json.find("\"name\":\"disk MB/s\"") != std::string::npos);
  CHECK(json.find("\"read\":104,\"write\":0") != std::string::npos);  // 1 MiB in 10 ms
  CHECK(json.find("\"page_faults\":192") != std::string::npos);
  CHECK(sched_events + 5 == in.events.size());
}
