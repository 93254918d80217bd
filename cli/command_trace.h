// `gcr checkpoint --trace FILE`, `gcr restore --trace FILE` and `gcr trace PID`: the kernel's
// timeline of one command (or of a while) beside gcrd's phases (Note [Kernel timeline] in
// trace/timeline.h), written as a Chrome/Perfetto trace, and the app-visible stall (or time to
// resume) as the kernel saw it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gcr/result.h"
#include "kernel_tracer.h"
#include "timeline.h"

namespace gcr::cli {

class CommandTrace {
 public:
  // Starts recording process `pid`. Never fails: without eBPF (no rights, no BTF, a build
  // without libbpf) the trace holds gcrd's phases only, and why is one of the notes.
  static CommandTrace begin(pid_t pid);

  // After the command: writes the trace to `file` and returns what to add to the command's
  // result (trace.* fields). `gcrd_fields` is gcrd's answer, null when the command failed. For a
  // restore, the trace began on gcrd (it follows the processes gcrd starts) and is about
  // `restored`: trace.resumed_ns says when CRIU and gcr's gate last held it (timeline.h).
  Result<std::map<std::string, std::string>> finish(
      const std::string& file, const std::map<std::string, std::string>* gcrd_fields,
      pid_t restored = 0);

 private:
  trace::TimelineInput input_;
  std::unique_ptr<trace::KernelTracer> tracer_;
  std::vector<std::string> notes_;
};

// The lines `gcr checkpoint` prints about a trace, from the trace.* fields.
std::string describe_trace(const std::map<std::string, std::string>& fields);

}  // namespace gcr::cli
