// The kernel's view of a process during a checkpoint (Note [Kernel timeline]): eBPF programs
// (sched.bpf.c) loaded through libbpf record every thread of the process going off and on CPU,
// with the task state it left in, and its waits at gcr's API gate. Needs the rights to load BPF
// (root, or CAP_BPF and CAP_PERFMON); start() says what is missing otherwise.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gcr/result.h"
#include "sched_event.h"

namespace gcr::trace {

using SchedEvent = gcr_sched_event;

class KernelTracer {
 public:
  // Starts recording the threads of process `pid`, and its waits at the gate of every gcr
  // interposer it maps. Whatever could not be attached is said in notes().
  static Result<std::unique_ptr<KernelTracer>> start(pid_t pid);
  virtual ~KernelTracer() = default;

  // Stops recording; the events in time order.
  virtual std::vector<SchedEvent> stop() = 0;
  // What the trace lacks and why ("gate waits not seen: ..."), and events the kernel dropped.
  virtual std::vector<std::string> notes() const = 0;
};

// Whether this gcr was built with eBPF support (libbpf, bpftool and clang at build time).
bool kernel_tracing_built();

}  // namespace gcr::trace
