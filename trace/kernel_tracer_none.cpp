// KernelTracer for a gcr built without libbpf, bpftool or clang's BPF target.
#include "kernel_tracer.h"

namespace gcr::trace {

Result<std::unique_ptr<KernelTracer>> KernelTracer::start(pid_t) {
  return Error{Errc::unsupported,
               "this gcr was built without eBPF support (it needs libbpf-dev, bpftool and clang at "
               "build time; scripts/setup.sh installs them)"};
}

bool kernel_tracing_built() {
  return false;
}

}  // namespace gcr::trace
