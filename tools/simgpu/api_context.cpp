// Contexts: primary contexts (one per device, reference-counted), created contexts, and each
// thread's current-context stack.
#include <algorithm>
#include <mutex>
#include <set>

#include "simgpu.h"

namespace gcr::simgpu {
namespace {

std::mutex g_ctx_mu;
std::set<CUctx_st*> g_contexts;
std::atomic<std::uint64_t> g_next_ctx_id{1};
thread_local std::vector<CUctx_st*> t_stack;

CUctx_st* make_context(int dev, unsigned flags, bool primary) {
  auto* ctx = new CUctx_st;
  ctx->device = dev;
  ctx->flags = flags;
  ctx->primary = primary;
  ctx->id = g_next_ctx_id++;
  ctx->legacy = new Stream(ctx, Stream::Kind::legacy, 0, 0);
  std::lock_guard lock(g_ctx_mu);
  g_contexts.insert(ctx);
  return ctx;
}

void destroy_context(CUctx_st* ctx) {
  drain_context(ctx);
  unload_context_modules(ctx);
  free_context_memory(ctx);
  destroy_context_streams(ctx);
  {
    std::lock_guard lock(g_ctx_mu);
    g_contexts.erase(ctx);
  }
  ctx->destroyed = true;
  ctx->magic = 0;
  // Handles stay allocated: a stale CUcontext held by the program must fail cleanly
  // (valid_context), not read freed memory.
}

}  // namespace

CUctx_st* current_context() {
  return t_stack.empty() ? nullptr : t_stack.back();
}

bool valid_context(CUctx_st* ctx) {
  if (!ctx) return false;
  std::lock_guard lock(g_ctx_mu);
  return g_contexts.count(ctx) != 0;
}

CUresult require_context(CUctx_st** out) {
  CUctx_st* ctx = current_context();
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  if (!valid_context(ctx)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = ctx;
  return CUDA_SUCCESS;
}

std::vector<CUctx_st*> all_contexts() {
  std::lock_guard lock(g_ctx_mu);
  return {g_contexts.begin(), g_contexts.end()};
}

}  // namespace gcr::simgpu

using namespace gcr::simgpu;

namespace {
CUresult create_context(CUcontext* pctx, unsigned flags, CUdevice dev) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  CUctx_st* ctx = make_context(dev, flags, false);
  t_stack.push_back(ctx);
  *pctx = ctx;
  return CUDA_SUCCESS;
}
std::mutex g_primary_mu;
}  // namespace

extern "C" {

CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                        CUdevice dev) {
  SIMGPU_API_BEGIN();
  if (params && (params->execAffinityParams || params->cigParams)) {
    log_once("ctx-params", "cuCtxCreate: execution affinity and CIG parameters are not simulated");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return create_context(pctx, flags, dev);
}

CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  SIMGPU_API_BEGIN();
  return create_context(pctx, flags, dev);
}

CUresult cuCtxDestroy_v2(CUcontext ctx) {
  SIMGPU_API_BEGIN();
  if (!valid_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx->primary) return CUDA_ERROR_INVALID_CONTEXT;
  std::erase(t_stack, ctx);
  destroy_context(ctx);
  return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  SIMGPU_API_BEGIN();
  if (!valid_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  t_stack.push_back(ctx);
  return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  SIMGPU_API_BEGIN();
  if (t_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx) *pctx = t_stack.back();
  t_stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
  SIMGPU_API_BEGIN();
  if (ctx && !valid_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (!ctx) {
    if (!t_stack.empty()) t_stack.pop_back();
    return CUDA_SUCCESS;
  }
  if (t_stack.empty())
    t_stack.push_back(ctx);
  else
    t_stack.back() = ctx;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext* pctx) {
  SIMGPU_API_BEGIN();
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = current_context();
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice* dev) {
  SIMGPU_API_BEGIN();
  if (!dev) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx;
  if (CUresult r = require_context(&ctx)) return r;
  *dev = ctx->device;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice_v2(CUdevice* dev, CUcontext ctx) {
  SIMGPU_API_BEGIN();
  if (!dev) return CUDA_ERROR_INVALID_VALUE;
  if (!ctx) ctx = current_context();
  if (!valid_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  *dev = ctx->device;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetFlags(unsigned int* flags) {
  SIMGPU_API_BEGIN();
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx;
  if (CUresult r = require_context(&ctx)) return r;
  *flags = ctx->flags;
  return CUDA_SUCCESS;
}

CUresult cuCtxSetFlags(unsigned int flags) {
  SIMGPU_API_BEGIN();
  CUctx_st* ctx;
  if (CUresult r = require_context(&ctx)) return r;
  ctx->flags = flags;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetId(CUcontext ctx, unsigned long long* id) {
  SIMGPU_API_BEGIN();
  if (!id) return CUDA_ERROR_INVALID_VALUE;
  if (!ctx) ctx = current_context();
  if (!valid_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  *id = ctx->id;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  SIMGPU_API_BEGIN();
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  if (!ctx) ctx = current_context();
  if (!valid_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  *version = 3020;
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize() {
  SIMGPU_API_BEGIN();
  CUctx_st* ctx;
  if (CUresult r = require_context(&ctx)) return r;
  OutsideGate wait;
  drain_context(ctx);
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  SIMGPU_API_BEGIN();
  if (!ctx) ctx = current_context();
  if (!valid_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  OutsideGate wait;
  drain_context(ctx);
  return CUDA_SUCCESS;
}

CUresult cuCtxGetLimit(size_t* value, CUlimit limit) {
  SIMGPU_API_BEGIN();
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx;
  if (CUresult r = require_context(&ctx)) return r;
  static const std::map<int, std::size_t> defaults = {{CU_LIMIT_STACK_SIZE, 1024},
                                                      {CU_LIMIT_PRINTF_FIFO_SIZE, 1 << 20},
                                                      {CU_LIMIT_MALLOC_HEAP_SIZE, 8 << 20},
                                                      {CU_LIMIT_MAX_L2_FETCH_GRANULARITY, 32},
                                                      {CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 0}};
  if (auto it = ctx->limits.find(static_cast<int>(limit)); it != ctx->limits.end()) {
    *value = it->second;
    return CUDA_SUCCESS;
  }
  auto d = defaults.find(limit);
  if (d == defaults.end()) return CUDA_ERROR_UNSUPPORTED_LIMIT;
  *value = d->second;
  return CUDA_SUCCESS;
}

CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  SIMGPU_API_BEGIN();
  CUctx_st* ctx;
  if (CUresult r = require_context(&ctx)) return r;
  ctx->limits[static_cast<int>(limit)] = value;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  SIMGPU_API_BEGIN();
  if (leastPriority) *leastPriority = 0;
  if (greatestPriority) *greatestPriority = -5;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCacheConfig(CUfunc_cache* config) {
  SIMGPU_API_BEGIN();
  if (!config) return CUDA_ERROR_INVALID_VALUE;
  *config = CU_FUNC_CACHE_PREFER_NONE;
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCacheConfig(CUfunc_cache) {
  SIMGPU_API_BEGIN();
  return CUDA_SUCCESS;
}

CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  SIMGPU_API_BEGIN();
  if (!valid_context(peer) || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult cuCtxDisablePeerAccess(CUcontext peer) {
  SIMGPU_API_BEGIN();
  if (!valid_context(peer)) return CUDA_ERROR_INVALID_CONTEXT;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  SIMGPU_API_BEGIN();
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(g_primary_mu);
  Device& d = device(dev);
  if (!d.primary) d.primary = make_context(dev, d.primary_flags, true);
  ++d.primary_refs;
  *pctx = d.primary;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  SIMGPU_API_BEGIN();
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(g_primary_mu);
  Device& d = device(dev);
  if (!d.primary || d.primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--d.primary_refs == 0) {
    CUctx_st* ctx = d.primary;
    d.primary = nullptr;
    std::erase(t_stack, ctx);
    destroy_context(ctx);
  }
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  SIMGPU_API_BEGIN();
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(g_primary_mu);
  Device& d = device(dev);
  if (d.primary) {
    CUctx_st* ctx = d.primary;
    d.primary = nullptr;
    d.primary_refs = 0;
    std::erase(t_stack, ctx);
    destroy_context(ctx);
  }
  d.primary_flags = 0;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  SIMGPU_API_BEGIN();
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(g_primary_mu);
  device(dev).primary_flags = flags;
  if (device(dev).primary) device(dev).primary->flags = flags;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  SIMGPU_API_BEGIN();
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(g_primary_mu);
  *flags = device(dev).primary_flags;
  *active = device(dev).primary != nullptr;
  return CUDA_SUCCESS;
}

}  // extern "C"
