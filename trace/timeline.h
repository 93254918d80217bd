// Note [Kernel timeline]
// `gcr checkpoint --trace FILE` records what the kernel saw of the process while gcr worked on it
// (kernel_tracer.h) and lays it out with gcrd's own phases:
// - Each thread's time is cut into slices: running, runnable, sleeping, blocked (D), stopped,
//   traced (CRIU has seized it), and, on a track of its own, waiting at gcr's API gate.
// - A thread is *held* while it waits at the gate or is stopped or traced: it wants to run the
//   application and gcr or CRIU does not let it. The app-visible stall is the longest interval
//   in which one thread was held without a break: what a training step or a request sees. It is
//   broken down by gcrd's phases (quiesce, park, dump, unpark, ...) that overlap it.
// - Page faults of the traced processes and the machine's disk requests are counters beside
//   them (per 10 ms): a restore whose load waits on the disk, or a process faulting its pages
//   back in, shows there.
// - Kernel timestamps (bpf_ktime_get_ns) and gcrd's (steady_clock) are both CLOCK_MONOTONIC, so
//   the two line up without conversion.
// The file is Chrome's trace event format (JSON), which the Perfetto UI opens offline.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "sched_event.h"

namespace gcr::trace {

struct Span {  // one of gcrd's phases
  std::string name;
  std::uint64_t start_ns = 0, end_ns = 0;
};

struct ThreadName {
  std::uint32_t tid = 0;
  std::string name;
  std::uint32_t tgid = 0;  // its process; 0: the traced one
};

struct TimelineInput {
  pid_t pid = 0;  // the process the trace is about (processes it started are traced too)
  std::map<std::uint32_t, std::string> process_names;  // by pid, as /proc named them
  std::vector<ThreadName> threads;                     // as /proc named them
  std::vector<gcr_sched_event> events;                 // in time order
  std::vector<Span> spans;
  std::uint64_t begin_ns = 0, end_ns = 0;  // the trace's window
};

enum class SliceKind { running, runnable, sleeping, blocked, stopped, traced, off_cpu, gate };

struct Slice {
  std::uint32_t tgid = 0;
  std::uint32_t tid = 0;
  SliceKind kind = SliceKind::running;
  std::uint64_t start_ns = 0, end_ns = 0;
};

const char* slice_name(SliceKind kind);

struct StallSummary {
  std::uint64_t stall_ns = 0;  // longest held interval of one thread
  std::uint64_t start_ns = 0, end_ns = 0;
  std::uint32_t tid = 0;        // the thread it was seen in
  std::uint64_t frozen_ns = 0;  // longest stopped or traced interval of any thread
  std::uint64_t gate_ns = 0;    // longest wait at the gate
  std::vector<std::pair<std::string, std::uint64_t>> phases;  // gcrd phases within the stall
  std::size_t threads = 0;                                    // threads seen
  std::uint64_t page_faults = 0;  // of the traced processes, in batches of GCR_FAULT_BATCH
  std::uint64_t disk_read_bytes = 0, disk_write_bytes = 0;  // the machine's, over the trace
};

// When process `tgid` was last let go: the latest end of a slice in which one of its threads was
// held (stopped or traced by CRIU, or waiting at gcr's gate); 0 when none was seen. For a
// restored process, when it runs its own code again: CRIU has let go of it and gcrd's unpark has
// opened the gate (the gate closes only for a checkpoint).
std::uint64_t last_held_end(const std::vector<Slice>& slices, std::uint32_t tgid);

// Every thread's slices over [begin_ns, end_ns], gate waits included.
std::vector<Slice> thread_slices(const TimelineInput& in);
StallSummary summarize(const TimelineInput& in, const std::vector<Slice>& slices);
std::string chrome_trace_json(const TimelineInput& in, const std::vector<Slice>& slices,
                              const StallSummary& summary);

}  // namespace gcr::trace
