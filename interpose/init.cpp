// cuInit and the contexts: the first CUDA call starts gcr in the process (the real driver, the
// agent thread); contexts are noted so that quiesce can drain them; fork leaves the child
// unmanaged. Nothing here runs from a constructor: a program that never calls CUDA never loads
// the real driver or starts a thread.
#include <pthread.h>
#include <sys/resource.h>

#include <cstdio>
#include <mutex>

#include "agent.h"
#include "alloc.h"
#include "gate.h"
#include "real_driver.h"
#include "regions.h"

namespace gcr::interpose {
namespace {

std::once_flag g_start_once;

// The fork hooks hold the region lock from prepare to parent or child, which the analysis cannot
// follow across functions.

void atfork_prepare() GCR_NO_THREAD_SAFETY_ANALYSIS {
  agent_prepare_fork();
  g_region_mu.lock();
}
void atfork_parent() GCR_NO_THREAD_SAFETY_ANALYSIS {
  g_region_mu.unlock();
  agent_after_fork_parent();
}
void atfork_child() GCR_NO_THREAD_SAFETY_ANALYSIS {
  g_region_mu.unlock();
  // The driver is unusable in a forked child of a CUDA process; gcr steps aside until exec.
  g_unmanaged = true;
  agent_after_fork_child();
}

// A park receives and sends one fd per region, an unpark too: with the default soft limit of 1024
// a process of more than about a thousand regions could not be parked (MSG_CTRUNC).
void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

void start() {
  raise_fd_limit();
  pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
  if (Status s = start_agent_thread(); !s)
    std::fprintf(stderr,
                 "gcr: control channel unavailable, checkpoints of this process will fail: %s\n",
                 s.error().message.c_str());
}

}  // namespace
}  // namespace gcr::interpose

using namespace gcr::interpose;

extern "C" {

CUresult cuInit(unsigned int flags) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NO_DEVICE;
  CUresult r = real->cuInit(flags);
  if (r == CUDA_SUCCESS && !g_unmanaged) std::call_once(g_start_once, start);
  return r;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real->cuDevicePrimaryCtxRetain(pctx, dev);
  GateScope gate;
  CUresult r = real->cuDevicePrimaryCtxRetain(pctx, dev);
  if (r == CUDA_SUCCESS && pctx) note_context(*pctx);
  return r;
}

CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                        CUdevice dev) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real->cuCtxCreate_v4(pctx, params, flags, dev);
  GateScope gate;
  CUresult r = real->cuCtxCreate_v4(pctx, params, flags, dev);
  if (r == CUDA_SUCCESS && pctx) note_context(*pctx);
  return r;
}

// The older variants, which programs built against CUDA 12 headers call (cuda.h 13 declares them
// only for the driver's own build): their contexts must be drained at quiesce too.
CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  using Fn = CUresult (*)(CUcontext*, unsigned int, CUdevice);
  static const auto real = real_fn<Fn>("cuCtxCreate_v2");
  if (g_unmanaged) return real(pctx, flags, dev);
  GateScope gate;
  CUresult r = real(pctx, flags, dev);
  if (r == CUDA_SUCCESS && pctx) note_context(*pctx);
  return r;
}

CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* params, int n, unsigned int flags,
                        CUdevice dev) {
  using Fn = CUresult (*)(CUcontext*, CUexecAffinityParam*, int, unsigned int, CUdevice);
  static const auto real = real_fn<Fn>("cuCtxCreate_v3");
  if (g_unmanaged) return real(pctx, params, n, flags, dev);
  GateScope gate;
  CUresult r = real(pctx, params, n, flags, dev);
  if (r == CUDA_SUCCESS && pctx) note_context(*pctx);
  return r;
}

CUresult cuCtxDestroy_v2(CUcontext ctx) {
  const RealDriver* real = real_driver();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real->cuCtxDestroy_v2(ctx);
  GateScope gate;  // quiesce drains every known context: none may go away under it
  CUresult r = real->cuCtxDestroy_v2(ctx);
  if (r == CUDA_SUCCESS) forget_context(ctx);
  return r;
}

}  // extern "C"
