// Stream and event calls, and host functions queued on streams. Interprocess events keep their
// state in shared memory (ipc.h) instead of in the recording stream's progress.
#include "ipc.h"
#include "simgpu.h"

using namespace gcr::simgpu;

namespace {

bool valid_event(CUevent e) {
  return e && e->magic == 0x45565431;
}

CUresult stream_query(CUstream h, bool ptsz) {
  SIMGPU_API_BEGIN();
  Stream* s;
  if (CUresult r = resolve_stream(h, ptsz, &s)) return r;
  return s->idle() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult stream_synchronize(CUstream h, bool ptsz) {
  SIMGPU_API_BEGIN();
  Stream* s;
  if (CUresult r = resolve_stream(h, ptsz, &s)) return r;
  OutsideGate wait;
  s->drain();
  return CUDA_SUCCESS;
}

CUresult stream_wait_event(CUstream h, CUevent e, unsigned flags, bool ptsz) {
  SIMGPU_API_BEGIN();
  if (!valid_event(e)) return CUDA_ERROR_INVALID_HANDLE;
  if (flags & ~CU_EVENT_WAIT_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  if (CUresult r = resolve_stream(h, ptsz, &s)) return r;
  if (SharedEventState* shared = e->shared) {
    // The record it waits for may come from another process: the wait is an operation of its
    // own on the stream, which holds the stream (and only it) until the event completes.
    std::uint64_t target = shared->recorded.load(std::memory_order_acquire);
    if (!shared_event_reached(shared, target))
      enqueue(s, [shared, target] { wait_shared_event(shared, target); });
    return CUDA_SUCCESS;
  }
  std::vector<Stream::Dep> deps;
  {
    std::lock_guard lock(e->mu);
    if (e->stream) deps.push_back({e->stream, e->seq});  // an unrecorded event is complete
  }
  if (!deps.empty()) enqueue(s, nullptr, std::move(deps));
  return CUDA_SUCCESS;
}

CUresult event_record(CUevent e, CUstream h, unsigned flags, bool ptsz) {
  SIMGPU_API_BEGIN();
  if (!valid_event(e)) return CUDA_ERROR_INVALID_HANDLE;
  Stream* s;
  if (CUresult r = resolve_stream(h, ptsz, &s)) return r;
  bool timed = !(e->flags & CU_EVENT_DISABLE_TIMING);
  std::lock_guard lock(e->mu);
  if (SharedEventState* shared = e->shared) {
    std::uint64_t generation = shared->recorded.fetch_add(1, std::memory_order_acq_rel) + 1;
    e->stream = s;
    e->timed = false;
    e->seq = enqueue(s, [shared, generation] { complete_shared_event(shared, generation); });
    return CUDA_SUCCESS;
  }
  // The record's completion is the stream reaching this operation; the timestamp is taken as
  // the worker runs it.
  e->stream = s;
  e->timed = timed;
  e->seq = enqueue(s, [e] {
    std::lock_guard l(e->mu);
    e->when = std::chrono::steady_clock::now();
  });
  return CUDA_SUCCESS;
}

CUresult launch_host_func(CUstream h, CUhostFn fn, void* user_data, bool ptsz) {
  SIMGPU_API_BEGIN();
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  if (CUresult r = resolve_stream(h, ptsz, &s)) return r;
  enqueue(s, [fn, user_data] { fn(user_data); });
  return CUDA_SUCCESS;
}

CUresult stream_add_callback(CUstream h, CUstreamCallback cb, void* user_data, unsigned flags,
                             bool ptsz) {
  SIMGPU_API_BEGIN();
  if (!cb || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  if (CUresult r = resolve_stream(h, ptsz, &s)) return r;
  enqueue(s, [cb, h, user_data] { cb(h, CUDA_SUCCESS, user_data); });
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuStreamCreate(CUstream* ph, unsigned int flags) {
  SIMGPU_API_BEGIN();
  if (!ph || (flags & ~CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx;
  if (CUresult r = require_context(&ctx)) return r;
  *ph = reinterpret_cast<CUstream>(new Stream(ctx, Stream::Kind::created, flags, 0));
  return CUDA_SUCCESS;
}

CUresult cuStreamCreateWithPriority(CUstream* ph, unsigned int flags, int priority) {
  SIMGPU_API_BEGIN();
  if (!ph || (flags & ~CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx;
  if (CUresult r = require_context(&ctx)) return r;
  priority = std::clamp(priority, -5, 0);
  *ph = reinterpret_cast<CUstream>(new Stream(ctx, Stream::Kind::created, flags, priority));
  return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(CUstream h) {
  SIMGPU_API_BEGIN();
  auto* s = reinterpret_cast<Stream*>(h);
  if (!h || s->magic != 0x53545231 || s->kind() != Stream::Kind::created)
    return CUDA_ERROR_INVALID_HANDLE;
  s->magic = 0;
  // As documented, the call returns at once and work already queued still completes.
  s->retire();
  return CUDA_SUCCESS;
}

CUresult cuStreamGetFlags(CUstream h, unsigned int* flags) {
  SIMGPU_API_BEGIN();
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  if (CUresult r = resolve_stream(h, false, &s)) return r;
  *flags = s->flags();
  return CUDA_SUCCESS;
}
CUresult cuStreamGetFlags_ptsz(CUstream h, unsigned int* flags) {
  return cuStreamGetFlags(h, flags);
}

CUresult cuStreamGetPriority(CUstream h, int* priority) {
  SIMGPU_API_BEGIN();
  if (!priority) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  if (CUresult r = resolve_stream(h, false, &s)) return r;
  *priority = s->priority();
  return CUDA_SUCCESS;
}
CUresult cuStreamGetPriority_ptsz(CUstream h, int* p) {
  return cuStreamGetPriority(h, p);
}

CUresult cuStreamGetCtx(CUstream h, CUcontext* pctx) {
  SIMGPU_API_BEGIN();
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  if (CUresult r = resolve_stream(h, false, &s)) return r;
  *pctx = s->ctx();
  return CUDA_SUCCESS;
}
CUresult cuStreamGetCtx_ptsz(CUstream h, CUcontext* pctx) {
  return cuStreamGetCtx(h, pctx);
}

CUresult cuStreamGetId(CUstream h, unsigned long long* id) {
  SIMGPU_API_BEGIN();
  if (!id) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  if (CUresult r = resolve_stream(h, false, &s)) return r;
  *id = s->id();
  return CUDA_SUCCESS;
}
CUresult cuStreamGetId_ptsz(CUstream h, unsigned long long* id) {
  return cuStreamGetId(h, id);
}

CUresult cuStreamQuery(CUstream h) {
  return stream_query(h, false);
}
CUresult cuStreamQuery_ptsz(CUstream h) {
  return stream_query(h, true);
}
CUresult cuStreamSynchronize(CUstream h) {
  return stream_synchronize(h, false);
}
CUresult cuStreamSynchronize_ptsz(CUstream h) {
  return stream_synchronize(h, true);
}
CUresult cuStreamWaitEvent(CUstream h, CUevent e, unsigned int flags) {
  return stream_wait_event(h, e, flags, false);
}
CUresult cuStreamWaitEvent_ptsz(CUstream h, CUevent e, unsigned int flags) {
  return stream_wait_event(h, e, flags, true);
}
CUresult cuLaunchHostFunc(CUstream h, CUhostFn fn, void* data) {
  return launch_host_func(h, fn, data, false);
}
CUresult cuLaunchHostFunc_ptsz(CUstream h, CUhostFn fn, void* data) {
  return launch_host_func(h, fn, data, true);
}
CUresult cuStreamAddCallback(CUstream h, CUstreamCallback cb, void* data, unsigned int flags) {
  return stream_add_callback(h, cb, data, flags, false);
}
CUresult cuStreamAddCallback_ptsz(CUstream h, CUstreamCallback cb, void* data, unsigned int flags) {
  return stream_add_callback(h, cb, data, flags, true);
}

// Stream capture is not simulated: no stream is ever capturing, and beginning a capture is
// refused, so that a program falls back to eager launches (as PyTorch does when graphs fail).
CUresult cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus* status) {
  SIMGPU_API_BEGIN();
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  if (CUresult r = resolve_stream(h, false, &s)) return r;
  *status = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
CUresult cuStreamIsCapturing_ptsz(CUstream h, CUstreamCaptureStatus* status) {
  return cuStreamIsCapturing(h, status);
}
CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  SIMGPU_API_BEGIN();
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  static thread_local CUstreamCaptureMode t_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::swap(*mode, t_mode);
  return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent* ph, unsigned int flags) {
  SIMGPU_API_BEGIN();
  if (!ph) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS))
    return CUDA_ERROR_INVALID_VALUE;
  if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING))
    return CUDA_ERROR_INVALID_VALUE;  // as documented: interprocess events cannot be timed
  CUctx_st* ctx;
  if (CUresult r = require_context(&ctx)) return r;
  auto e = std::make_unique<CUevent_st>();
  e->flags = flags;
  e->ctx = ctx;
  if (flags & CU_EVENT_INTERPROCESS)
    if (CUresult r = create_shared_event(e.get())) return r;
  *ph = e.release();
  return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent e) {
  SIMGPU_API_BEGIN();
  if (!valid_event(e)) return CUDA_ERROR_INVALID_HANDLE;
  // A record still queued refers to the event: let it complete before the memory goes.
  Stream* s;
  std::uint64_t seq;
  {
    std::lock_guard lock(e->mu);
    s = e->stream;
    seq = e->seq;
  }
  if (s) {
    OutsideGate wait;
    s->wait(seq);
  }
  e->magic = 0;
  close_shared_event(e);
  delete e;
  return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent e, CUstream h) {
  return event_record(e, h, 0, false);
}
CUresult cuEventRecord_ptsz(CUevent e, CUstream h) {
  return event_record(e, h, 0, true);
}
CUresult cuEventRecordWithFlags(CUevent e, CUstream h, unsigned int flags) {
  return event_record(e, h, flags, false);
}
CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream h, unsigned int flags) {
  return event_record(e, h, flags, true);
}

CUresult cuEventQuery(CUevent e) {
  SIMGPU_API_BEGIN();
  if (!valid_event(e)) return CUDA_ERROR_INVALID_HANDLE;
  if (const SharedEventState* shared = e->shared)
    return shared_event_reached(shared, shared->recorded.load(std::memory_order_acquire))
               ? CUDA_SUCCESS
               : CUDA_ERROR_NOT_READY;
  std::lock_guard lock(e->mu);
  return !e->stream || e->stream->reached(e->seq) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuEventSynchronize(CUevent e) {
  SIMGPU_API_BEGIN();
  if (!valid_event(e)) return CUDA_ERROR_INVALID_HANDLE;
  if (SharedEventState* shared = e->shared) {
    std::uint64_t target = shared->recorded.load(std::memory_order_acquire);
    OutsideGate wait;
    wait_shared_event(shared, target);
    return CUDA_SUCCESS;
  }
  Stream* s;
  std::uint64_t seq;
  {
    std::lock_guard lock(e->mu);
    s = e->stream;
    seq = e->seq;
  }
  if (s) {
    OutsideGate wait;
    s->wait(seq);
  }
  return CUDA_SUCCESS;
}

CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  SIMGPU_API_BEGIN();
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_event(start) || !valid_event(end)) return CUDA_ERROR_INVALID_HANDLE;
  std::scoped_lock lock(start->mu, end->mu);
  if (!start->timed || !end->timed) return CUDA_ERROR_INVALID_HANDLE;
  if (!start->stream || !end->stream) return CUDA_ERROR_INVALID_HANDLE;
  if (!start->stream->reached(start->seq) || !end->stream->reached(end->seq))
    return CUDA_ERROR_NOT_READY;
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return CUDA_SUCCESS;
}

}  // extern "C"
