#include "timeline.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>

#include "gcr/json.h"  // json_quote (RFC 8259, invalid UTF-8 made U+FFFD)

namespace gcr::trace {
namespace {

SliceKind off_cpu_kind(std::uint32_t state) {
  if (state & GCR_TASK_TRACED) return SliceKind::traced;
  if (state & GCR_TASK_STOPPED) return SliceKind::stopped;
  if (state & GCR_TASK_UNINTERRUPTIBLE) return SliceKind::blocked;
  if (state & GCR_TASK_INTERRUPTIBLE) return SliceKind::sleeping;
  if (state == GCR_TASK_RUNNING) return SliceKind::runnable;  // preempted
  return SliceKind::off_cpu;
}

bool holds(SliceKind k) {
  return k == SliceKind::gate || k == SliceKind::stopped || k == SliceKind::traced;
}

struct ThreadState {
  std::uint32_t tgid = 0;
  std::optional<SliceKind> kind;  // unknown until its first event
  std::uint64_t since = 0;
  std::optional<std::uint64_t> gate_since;
};

void close(std::vector<Slice>& out, const ThreadState& t, std::uint32_t tid, SliceKind kind,
           std::uint64_t from, std::uint64_t to) {
  if (to > from) out.push_back({t.tgid, tid, kind, from, to});
}

std::string micros(std::uint64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(ns) / 1e3);
  return buf;
}

}  // namespace

const char* slice_name(SliceKind kind) {
  switch (kind) {
    case SliceKind::running:
      return "running";
    case SliceKind::runnable:
      return "runnable";
    case SliceKind::sleeping:
      return "sleeping";
    case SliceKind::blocked:
      return "blocked (D)";
    case SliceKind::stopped:
      return "stopped";
    case SliceKind::traced:
      return "traced (CRIU)";
    case SliceKind::off_cpu:
      return "off CPU";
    case SliceKind::gate:
      return "waiting at gcr's gate";
  }
  return "?";
}

std::uint64_t last_held_end(const std::vector<Slice>& slices, std::uint32_t tgid) {
  std::uint64_t last = 0;
  for (const Slice& s : slices)
    if (s.tgid == tgid && holds(s.kind)) last = std::max(last, s.end_ns);
  return last;
}

std::vector<Slice> thread_slices(const TimelineInput& in) {
  std::map<std::uint32_t, ThreadState> threads;
  std::vector<Slice> out;
  for (const ThreadName& t : in.threads)
    threads[t.tid].tgid = t.tgid ? t.tgid : static_cast<std::uint32_t>(in.pid);
  for (const gcr_sched_event& e : in.events) {
    if (e.ts_ns < in.begin_ns || e.ts_ns > in.end_ns) continue;
    if (e.kind == GCR_EV_FAULTS || e.kind == GCR_EV_IO_READ || e.kind == GCR_EV_IO_WRITE)
      continue;  // counters, not scheduling (chrome_trace_json)
    ThreadState& t = threads[e.tid];
    t.tgid = e.tgid;
    auto move_to = [&](SliceKind next, SliceKind before_trace) {
      close(out, t, e.tid, t.kind.value_or(before_trace), t.kind ? t.since : in.begin_ns, e.ts_ns);
      t.kind = next;
      t.since = e.ts_ns;
    };
    switch (e.kind) {
      case GCR_EV_OFF_CPU:
        // Seen leaving the CPU first: it was on it since before the trace began.
        move_to(off_cpu_kind(e.state), SliceKind::running);
        break;
      case GCR_EV_ON_CPU:
        move_to(SliceKind::running, SliceKind::off_cpu);
        break;
      case GCR_EV_WAKEUP:
        if (t.kind != SliceKind::running && t.kind != SliceKind::runnable)
          move_to(SliceKind::runnable, SliceKind::sleeping);
        break;
      case GCR_EV_NEW_THREAD:
        t.kind = SliceKind::runnable;
        t.since = e.ts_ns;
        break;
      case GCR_EV_GATE_IN:  // once per futex wait while the gate stays closed: the first counts
        if (!t.gate_since) t.gate_since = e.ts_ns;
        break;
      case GCR_EV_GATE_OUT:
        close(out, t, e.tid, SliceKind::gate, t.gate_since.value_or(in.begin_ns), e.ts_ns);
        t.gate_since.reset();
        break;
    }
  }
  for (auto& [tid, t] : threads) {
    if (t.kind) close(out, t, tid, *t.kind, t.since, in.end_ns);
    if (t.gate_since) close(out, t, tid, SliceKind::gate, *t.gate_since, in.end_ns);
  }
  std::stable_sort(out.begin(), out.end(), [](const Slice& a, const Slice& b) {
    return a.tid != b.tid ? a.tid < b.tid : a.start_ns < b.start_ns;
  });
  return out;
}

StallSummary summarize(const TimelineInput& in, const std::vector<Slice>& slices) {
  StallSummary s;
  std::map<std::uint32_t, std::vector<std::pair<std::uint64_t, std::uint64_t>>> held;
  for (const Slice& sl : slices) {
    std::uint64_t len = sl.end_ns - sl.start_ns;
    if (sl.kind == SliceKind::gate) s.gate_ns = std::max(s.gate_ns, len);
    if (sl.kind == SliceKind::stopped || sl.kind == SliceKind::traced)
      s.frozen_ns = std::max(s.frozen_ns, len);
    if (holds(sl.kind)) held[sl.tid].push_back({sl.start_ns, sl.end_ns});
  }
  std::map<std::uint32_t, bool> seen;
  for (const Slice& sl : slices) seen[sl.tid] = true;
  s.threads = seen.size();
  for (auto& [tid, intervals] : held) {
    std::sort(intervals.begin(), intervals.end());
    std::uint64_t a = intervals[0].first, b = intervals[0].second;
    auto consider = [&] {
      if (b - a > s.stall_ns) {
        s.stall_ns = b - a;
        s.start_ns = a;
        s.end_ns = b;
        s.tid = tid;
      }
    };
    for (std::size_t i = 1; i < intervals.size(); ++i) {
      if (intervals[i].first <= b) {
        b = std::max(b, intervals[i].second);
      } else {
        consider();
        a = intervals[i].first;
        b = intervals[i].second;
      }
    }
    consider();
  }
  for (const Span& sp : in.spans) {
    std::uint64_t from = std::max(sp.start_ns, s.start_ns), to = std::min(sp.end_ns, s.end_ns);
    if (s.stall_ns && to > from) s.phases.push_back({sp.name, to - from});
  }
  for (const gcr_sched_event& e : in.events) {
    if (e.ts_ns < in.begin_ns || e.ts_ns > in.end_ns) continue;
    if (e.kind == GCR_EV_FAULTS) s.page_faults += e.state;
    if (e.kind == GCR_EV_IO_READ) s.disk_read_bytes += e.state;
    if (e.kind == GCR_EV_IO_WRITE) s.disk_write_bytes += e.state;
  }
  return s;
}

std::string chrome_trace_json(const TimelineInput& in, const std::vector<Slice>& slices,
                              const StallSummary& summary) {
  // gcrd's phases and the stall go on a process track of their own; each thread's gate waits on
  // a track beside the thread's (the slices overlap its scheduling slices without nesting).
  constexpr std::int64_t kGcrdTrack = 0x7ffffff0;
  constexpr std::uint32_t kGateTrackBit = 0x40000000;
  std::string pid = std::to_string(in.pid);
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  auto add = [&](const std::string& event) {
    if (!first) out += ",\n";
    first = false;
    out += event;
  };
  auto rel = [&](std::uint64_t ns) { return micros(ns > in.begin_ns ? ns - in.begin_ns : 0); };
  std::map<std::uint32_t, std::string> processes = in.process_names;
  processes.emplace(static_cast<std::uint32_t>(in.pid), "");
  std::map<std::uint32_t, std::string> names;
  for (const ThreadName& t : in.threads) names[t.tid] = t.name;
  std::map<std::uint32_t, std::uint32_t> owner;  // thread -> process
  for (const ThreadName& t : in.threads)
    if (t.tgid) {
      owner[t.tid] = t.tgid;
      processes.emplace(t.tgid, "");
    }
  std::map<std::uint32_t, bool> gate_tracks;
  for (const Slice& sl : slices) {
    processes.emplace(sl.tgid, "");
    owner[sl.tid] = sl.tgid;
    if (!names.count(sl.tid)) names[sl.tid] = "thread " + std::to_string(sl.tid);
    if (sl.kind == SliceKind::gate) gate_tracks[sl.tid] = true;
  }
  auto process_of = [&](std::uint32_t tid) {
    auto it = owner.find(tid);
    return std::to_string(it == owner.end() ? static_cast<std::uint32_t>(in.pid) : it->second);
  };
  for (const auto& [p, name] : processes)
    add("{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + std::to_string(p) +
        ",\"args\":{\"name\":" +
        json_quote("pid " + std::to_string(p) + (name.empty() ? "" : " (" + name + ")")) + "}}");
  add("{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + std::to_string(kGcrdTrack) +
      ",\"args\":{\"name\":\"gcrd\"}}");
  for (const auto& [tid, name] : names)
    add("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + process_of(tid) +
        ",\"tid\":" + std::to_string(tid) + ",\"args\":{\"name\":" + json_quote(name) + "}}");
  for (const auto& [tid, _] : gate_tracks)
    add("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + process_of(tid) +
        ",\"tid\":" + std::to_string(tid | kGateTrackBit) + ",\"args\":{\"name\":" +
        json_quote(names[tid] + " " + std::to_string(tid) + ": gcr gate") + "}}");
  for (const Slice& sl : slices) {
    std::uint32_t tid = sl.kind == SliceKind::gate ? (sl.tid | kGateTrackBit) : sl.tid;
    add("{\"ph\":\"X\",\"cat\":\"sched\",\"name\":" + json_quote(slice_name(sl.kind)) +
        ",\"pid\":" + std::to_string(sl.tgid) + ",\"tid\":" + std::to_string(tid) +
        ",\"ts\":" + rel(sl.start_ns) + ",\"dur\":" + micros(sl.end_ns - sl.start_ns) + "}");
  }
  for (const Span& sp : in.spans)
    add("{\"ph\":\"X\",\"cat\":\"gcrd\",\"name\":" + json_quote(sp.name) +
        ",\"pid\":" + std::to_string(kGcrdTrack) + ",\"tid\":1,\"ts\":" + rel(sp.start_ns) +
        ",\"dur\":" + micros(sp.end_ns - sp.start_ns) + "}");
  // Counters per 10 ms: each traced process's page faults, the machine's disk requests.
  constexpr std::uint64_t kBinNs = 10'000'000;
  constexpr std::int64_t kMachineTrack = 0x7ffffff1;
  std::map<std::uint32_t, std::map<std::uint64_t, std::uint64_t>> faults;  // tgid -> bin -> n
  std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> disk;   // bin -> read, write
  for (const gcr_sched_event& e : in.events) {
    if (e.ts_ns < in.begin_ns || e.ts_ns > in.end_ns) continue;
    std::uint64_t bin = (e.ts_ns - in.begin_ns) / kBinNs;
    if (e.kind == GCR_EV_FAULTS) faults[e.tgid][bin] += e.state;
    if (e.kind == GCR_EV_IO_READ) disk[bin].first += e.state;
    if (e.kind == GCR_EV_IO_WRITE) disk[bin].second += e.state;
  }
  // A sample per bin from the first to one past the last, zeros included, so the chart is flat
  // where nothing happened.
  auto counter = [&](const std::string& name, std::int64_t track, std::uint64_t bin,
                     const std::string& args) {
    add("{\"ph\":\"C\",\"name\":" + json_quote(name) + ",\"pid\":" + std::to_string(track) +
        ",\"ts\":" + micros(bin * kBinNs) + ",\"args\":{" + args + "}}");
  };
  for (const auto& [tgid, bins] : faults) {
    for (std::uint64_t b = bins.begin()->first; b <= bins.rbegin()->first + 1; ++b) {
      auto it = bins.find(b);
      counter("page faults per 10 ms", tgid, b,
              "\"faults\":" + std::to_string(it == bins.end() ? 0 : it->second));
    }
  }
  if (!disk.empty()) {
    add("{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + std::to_string(kMachineTrack) +
        ",\"args\":{\"name\":\"machine: disk requests\"}}");
    for (std::uint64_t b = disk.begin()->first; b <= disk.rbegin()->first + 1; ++b) {
      auto it = disk.find(b);
      auto mbps = [](std::uint64_t bytes) { return std::to_string(bytes * 100 / 1000000); };
      counter("disk MB/s", kMachineTrack, b,
              "\"read\":" + mbps(it == disk.end() ? 0 : it->second.first) +
                  ",\"write\":" + mbps(it == disk.end() ? 0 : it->second.second));
    }
  }
  if (summary.stall_ns)
    add("{\"ph\":\"X\",\"cat\":\"stall\",\"name\":\"app-visible stall (kernel)\",\"pid\":" +
        std::to_string(kGcrdTrack) + ",\"tid\":2,\"ts\":" + rel(summary.start_ns) + ",\"dur\":" +
        micros(summary.stall_ns) + ",\"args\":{\"tid\":" + std::to_string(summary.tid) + "}}");
  out += "\n],\"otherData\":{\"producer\":\"gcr --trace\"},\"gcr\":{\"pid\":" + pid +
         ",\"stall_ns\":" + std::to_string(summary.stall_ns) +
         ",\"stall_start_ns\":" + std::to_string(summary.start_ns) +
         ",\"stall_tid\":" + std::to_string(summary.tid) +
         ",\"frozen_ns\":" + std::to_string(summary.frozen_ns) +
         ",\"gate_ns\":" + std::to_string(summary.gate_ns) +
         ",\"page_faults\":" + std::to_string(summary.page_faults) +
         ",\"disk_read_bytes\":" + std::to_string(summary.disk_read_bytes) +
         ",\"disk_write_bytes\":" + std::to_string(summary.disk_write_bytes) +
         ",\"begin_ns\":" + std::to_string(in.begin_ns) +
         ",\"end_ns\":" + std::to_string(in.end_ns) + "}}\n";
  return out;
}

}  // namespace gcr::trace
