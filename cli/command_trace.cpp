#include "command_trace.h"

#include <dirent.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <set>
#include <span>

#include "gcr/human_output.h"
#include "gcr/unique_fd.h"
#include "gcrd_client.h"
#include "gcr/file.h"

namespace gcr::cli {
namespace {

std::uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

std::string read_comm(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

std::vector<trace::ThreadName> threads_of(pid_t pid) {
  std::vector<trace::ThreadName> out;
  std::string dir = "/proc/" + std::to_string(pid) + "/task";
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      out.push_back({static_cast<std::uint32_t>(std::atoi(e->d_name)),
                     read_comm(dir + "/" + e->d_name + "/comm")});
    }
    closedir(d);
  }
  return out;
}

// gcrd's phases from its answer: start.PHASE_ns and time.PHASE_ns. Longer first at equal
// starts, so that a viewer nests the stall's phases inside it.
std::vector<trace::Span> gcrd_spans(const std::map<std::string, std::string>& f) {
  std::vector<trace::Span> out;
  for (const auto& [k, v] : f) {
    if (k.rfind("start.", 0) != 0 || k.size() < 10) continue;
    std::string phase = k.substr(6, k.size() - 6 - 3);
    auto len = f.find("time." + phase + "_ns");
    if (len == f.end()) continue;
    std::uint64_t start = std::strtoull(v.c_str(), nullptr, 10);
    out.push_back({phase, start, start + std::strtoull(len->second.c_str(), nullptr, 10)});
  }
  std::sort(out.begin(), out.end(), [](const trace::Span& a, const trace::Span& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
  });
  return out;
}

// The whole trace, then renamed into place: a reader never sees half a file, and a link planted
// where it goes (the caller's directory may be another user's) is replaced, not written through.
// 0600: a trace names every process's threads and the machine's disk activity.
Status write_file_atomically(const std::string& file, const std::string& text) {
  return io::replace_file(file, std::as_bytes(std::span(text.data(), text.size())), 0600);
}

using gcrd::field_u64;

}  // namespace

CommandTrace CommandTrace::begin(pid_t pid) {
  CommandTrace t;
  t.input_.pid = pid;
  t.input_.process_names[static_cast<std::uint32_t>(pid)] =
      read_comm("/proc/" + std::to_string(pid) + "/comm");
  t.input_.threads = threads_of(pid);
  auto tracer = trace::KernelTracer::start(pid);
  if (tracer)
    t.tracer_ = std::move(tracer).value();
  else
    t.notes_.push_back("no kernel timeline, gcrd's phases only: " + tracer.error().message);
  t.input_.begin_ns = monotonic_ns();
  return t;
}

Result<std::map<std::string, std::string>> CommandTrace::finish(
    const std::string& file, const std::map<std::string, std::string>* gcrd_fields,
    pid_t restored) {
  input_.end_ns = monotonic_ns();
  if (tracer_) {
    input_.events = tracer_->stop();
    for (std::string& n : tracer_->notes()) notes_.push_back(std::move(n));
  }
  if (gcrd_fields) input_.spans = gcrd_spans(*gcrd_fields);
  // Processes the traced one started (a restore's CRIU and restored tasks): named while they run.
  // Their threads, and the traced process's threads started since (gcrd's loader), likewise.
  std::set<std::uint32_t> named;
  for (const trace::ThreadName& t : input_.threads) named.insert(t.tid);
  for (const trace::SchedEvent& e : input_.events) {
    if (!input_.process_names.count(e.tgid))
      input_.process_names[e.tgid] = read_comm("/proc/" + std::to_string(e.tgid) + "/comm");
    if (e.tid != e.tgid && named.insert(e.tid).second) {
      std::string name =
          read_comm("/proc/" + std::to_string(e.tgid) + "/task/" + std::to_string(e.tid) + "/comm");
      if (!name.empty()) input_.threads.push_back({e.tid, std::move(name), e.tgid});
    }
  }
  const auto subject = static_cast<std::uint32_t>(restored ? restored : input_.pid);
  if (restored) input_.pid = restored;
  if (tracer_ && !restored &&
      std::none_of(input_.events.begin(), input_.events.end(), [&](const trace::SchedEvent& e) {
        return e.kind == GCR_EV_GATE_IN && e.tgid == subject;
      }))
    notes_.push_back("no thread of pid " + std::to_string(subject) +
                     " was seen waiting at gcr's API gate (it does not run under gcr, or made no "
                     "CUDA call while the gate was closed)");
  std::vector<trace::Slice> slices = trace::thread_slices(input_);
  // A restore has no stall of its own: the summary is about a checkpoint.
  trace::StallSummary summary = trace::summarize(input_, slices);
  if (restored) {
    trace::StallSummary counters = summary;
    summary = trace::StallSummary{};
    summary.threads = counters.threads;
    summary.page_faults = counters.page_faults;
    summary.disk_read_bytes = counters.disk_read_bytes;
    summary.disk_write_bytes = counters.disk_write_bytes;
  }
  GCR_TRY(write_file_atomically(file, trace::chrome_trace_json(input_, slices, summary)));
  std::map<std::string, std::string> out;
  out["trace.file"] = file;
  out["trace.kernel"] = tracer_ ? "1" : "0";
  if (tracer_) {
    out["trace.events"] = std::to_string(input_.events.size());
    out["trace.threads"] = std::to_string(summary.threads);
    out["trace.page_faults"] = std::to_string(summary.page_faults);
    out["trace.disk_read_bytes"] = std::to_string(summary.disk_read_bytes);
    out["trace.disk_write_bytes"] = std::to_string(summary.disk_write_bytes);
  }
  if (tracer_ && !restored) {
    out["trace.stall_ns"] = std::to_string(summary.stall_ns);
    out["trace.stall_start_ns"] = std::to_string(summary.start_ns);
    out["trace.stall_tid"] = std::to_string(summary.tid);
    out["trace.frozen_ns"] = std::to_string(summary.frozen_ns);
    out["trace.gate_ns"] = std::to_string(summary.gate_ns);
    for (const auto& [phase, ns] : summary.phases)
      if (phase != "stall" && phase != "total")
        out["trace.stall." + phase + "_ns"] = std::to_string(ns);
  }
  if (tracer_ && restored) {
    // CRIU has let go of the restored process and its gate is open: it runs its own code.
    std::uint64_t resumed = trace::last_held_end(slices, subject);
    if (resumed > input_.begin_ns)
      out["trace.resumed_ns"] = std::to_string(resumed - input_.begin_ns);
  }
  for (std::size_t i = 0; i < notes_.size(); ++i)
    out["trace.note." + std::to_string(i)] = notes_[i];
  return out;
}

std::string describe_trace(const std::map<std::string, std::string>& f) {
  auto file = f.find("trace.file");
  if (file == f.end()) return "";
  std::string out;
  if (field_u64(f, "trace.stall_ns")) {
    out += "  kernel-measured stall " +
           format_duration(std::chrono::nanoseconds(field_u64(f, "trace.stall_ns"))) + " (thread " +
           std::to_string(field_u64(f, "trace.stall_tid")) + ")";
    std::string phases;
    for (const auto& [k, v] : f) {
      if (k.rfind("trace.stall.", 0) != 0) continue;
      std::string phase = k.substr(12, k.size() - 12 - 3);
      phases += (phases.empty() ? "" : ", ") + phase + " " +
                format_duration(std::chrono::nanoseconds(std::strtoull(v.c_str(), nullptr, 10)));
    }
    if (!phases.empty()) out += ": " + phases;
    out += "; frozen by CRIU " +
           format_duration(std::chrono::nanoseconds(field_u64(f, "trace.frozen_ns"))) + "\n";
  }
  if (field_u64(f, "trace.resumed_ns"))
    out += "  kernel-measured: CRIU and gcr's gate let go of it " +
           format_duration(std::chrono::nanoseconds(field_u64(f, "trace.resumed_ns"))) +
           " after the command began\n";
  if (f.count("trace.page_faults"))
    out += "  kernel-measured: " + std::to_string(field_u64(f, "trace.page_faults")) +
           " page faults of the traced processes; the machine's disks read " +
           format_bytes(field_u64(f, "trace.disk_read_bytes")) + " and wrote " +
           format_bytes(field_u64(f, "trace.disk_write_bytes")) + "\n";
  out += "  trace written to " + file->second + " (open it in ui.perfetto.dev)\n";
  return out;
}

}  // namespace gcr::cli
