// Stream memory operations: cuStreamWaitValue32/64, cuStreamWriteValue32/64 and
// cuStreamBatchMemOp (each under its v1, _v2 and per-thread names; simgpu implements the v2
// semantics for all of them).
//
// Memory order, as on a GPU: a write is a release (everything the stream did before it, and
// every write of a kernel it ran, is visible to whoever observes the value) unless
// CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER; a wait is an acquire (work queued after it sees what
// the writer published). The target may be device memory (the process's own, VMM memory imported
// from another process, or IPC memory) or registered host memory, so the other side may be a
// kernel, a stream, the host, or another process: a wait therefore polls, backing off from
// spinning to sleeps of at most 50 us, on the stream's worker, holding that stream only.
#include <sched.h>

#include <atomic>
#include <ctime>
#include <vector>

#include "simgpu.h"

// cuda.h renames the base names to the _v2 variants (whose ABI is the same): undone, so that
// every exported name is defined below.
#undef cuStreamWaitValue32
#undef cuStreamWaitValue64
#undef cuStreamWriteValue32
#undef cuStreamWriteValue64
#undef cuStreamBatchMemOp

using namespace gcr::simgpu;

namespace {

struct MemOp {
  enum class Kind { wait32, wait64, write32, write64, fence } kind;
  void* target = nullptr;
  std::uint64_t value = 0;
  unsigned flags = 0;
};

// The host address the simulator reaches `addr` through, or null if a memop may not use it.
void* target_of(CUdeviceptr addr, unsigned bytes, bool write) {
  if (addr == 0 || addr % bytes != 0) return nullptr;
  DeviceRange r;
  if (find_device_range(addr, bytes, &r))
    return (write ? r.writable : r.readable) ? alias(addr) : nullptr;
  auto* host = reinterpret_cast<void*>(addr);
  return is_pinned_host(host, bytes) ? host : nullptr;
}

template <typename T>
bool satisfied(T v, T value, unsigned condition) {
  using S = std::make_signed_t<T>;
  switch (condition) {
    case CU_STREAM_WAIT_VALUE_GEQ:
      return static_cast<S>(v - value) >= 0;  // cyclic: wraps as the documentation says
    case CU_STREAM_WAIT_VALUE_EQ:
      return v == value;
    case CU_STREAM_WAIT_VALUE_AND:
      return (v & value) != 0;
    case CU_STREAM_WAIT_VALUE_NOR:
      return static_cast<T>(~(v | value)) != 0;
  }
  return false;
}

template <typename T>
void wait_value(void* target, T value, unsigned condition) {
  std::atomic_ref<T> word(*static_cast<T*>(target));
  for (unsigned spins = 0; !satisfied(word.load(std::memory_order_acquire), value, condition);
       ++spins) {
    if (spins < 64) continue;
    if (spins < 128) {
      sched_yield();
      continue;
    }
    timespec pause{0, std::min<long>(50'000, 1'000L * (spins - 127))};
    nanosleep(&pause, nullptr);
  }
}

template <typename T>
void write_value(void* target, T value, unsigned flags) {
  std::atomic_ref<T> word(*static_cast<T*>(target));
  word.store(value, flags & CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER ? std::memory_order_relaxed
                                                                    : std::memory_order_release);
}

void run(const MemOp& op) {
  constexpr unsigned kCondition = ~static_cast<unsigned>(CU_STREAM_WAIT_VALUE_FLUSH);
  switch (op.kind) {
    case MemOp::Kind::wait32:
      wait_value<std::uint32_t>(op.target, static_cast<std::uint32_t>(op.value),
                                op.flags & kCondition);
      break;
    case MemOp::Kind::wait64:
      wait_value<std::uint64_t>(op.target, op.value, op.flags & kCondition);
      break;
    case MemOp::Kind::write32:
      if (is_pinned_host(op.target, 4)) check_device_write_to_host(op.target, 4);
      write_value<std::uint32_t>(op.target, static_cast<std::uint32_t>(op.value), op.flags);
      break;
    case MemOp::Kind::write64:
      if (is_pinned_host(op.target, 8)) check_device_write_to_host(op.target, 8);
      write_value<std::uint64_t>(op.target, op.value, op.flags);
      break;
    case MemOp::Kind::fence:
      std::atomic_thread_fence(std::memory_order_seq_cst);
      break;
  }
}

CUresult make_wait(CUdeviceptr addr, std::uint64_t value, unsigned flags, bool is64, MemOp* out) {
  unsigned condition = flags & ~static_cast<unsigned>(CU_STREAM_WAIT_VALUE_FLUSH);
  if (condition > CU_STREAM_WAIT_VALUE_NOR) return CUDA_ERROR_INVALID_VALUE;
  void* target = target_of(addr, is64 ? 8 : 4, false);
  if (!target) return CUDA_ERROR_INVALID_VALUE;
  *out = MemOp{is64 ? MemOp::Kind::wait64 : MemOp::Kind::wait32, target, value, flags};
  return CUDA_SUCCESS;
}

CUresult make_write(CUdeviceptr addr, std::uint64_t value, unsigned flags, bool is64, MemOp* out) {
  if (flags & ~static_cast<unsigned>(CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER))
    return CUDA_ERROR_INVALID_VALUE;
  void* target = target_of(addr, is64 ? 8 : 4, true);
  if (!target) return CUDA_ERROR_INVALID_VALUE;
  *out = MemOp{is64 ? MemOp::Kind::write64 : MemOp::Kind::write32, target, value, flags};
  return CUDA_SUCCESS;
}

CUresult make_op(const CUstreamBatchMemOpParams& p, MemOp* out) {
  switch (p.operation) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
      return make_wait(p.waitValue.address, p.waitValue.value, p.waitValue.flags, false, out);
    case CU_STREAM_MEM_OP_WAIT_VALUE_64:
      return make_wait(p.waitValue.address, p.waitValue.value64, p.waitValue.flags, true, out);
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
      return make_write(p.writeValue.address, p.writeValue.value, p.writeValue.flags, false, out);
    case CU_STREAM_MEM_OP_WRITE_VALUE_64:
      return make_write(p.writeValue.address, p.writeValue.value64, p.writeValue.flags, true, out);
    case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
      if (p.flushRemoteWrites.flags != 0) return CUDA_ERROR_INVALID_VALUE;
      *out = MemOp{MemOp::Kind::fence};
      return CUDA_SUCCESS;
    case CU_STREAM_MEM_OP_BARRIER:
      if (p.memoryBarrier.flags != CU_STREAM_MEMORY_BARRIER_TYPE_SYS &&
          p.memoryBarrier.flags != CU_STREAM_MEMORY_BARRIER_TYPE_GPU)
        return CUDA_ERROR_INVALID_VALUE;
      *out = MemOp{MemOp::Kind::fence};
      return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult enqueue_ops(CUstream h, bool ptsz, std::vector<MemOp> ops) {
  Stream* s;
  if (CUresult r = resolve_stream(h, ptsz, &s)) return r;
  enqueue(s, [ops = std::move(ops)] {
    for (const MemOp& op : ops) run(op);
  });
  return CUDA_SUCCESS;
}

CUresult wait_value_call(CUstream h, CUdeviceptr addr, std::uint64_t value, unsigned flags,
                         bool is64, bool ptsz) {
  SIMGPU_API_BEGIN();
  MemOp op;
  if (CUresult r = make_wait(addr, value, flags, is64, &op)) return r;
  return enqueue_ops(h, ptsz, {op});
}

CUresult write_value_call(CUstream h, CUdeviceptr addr, std::uint64_t value, unsigned flags,
                          bool is64, bool ptsz) {
  SIMGPU_API_BEGIN();
  MemOp op;
  if (CUresult r = make_write(addr, value, flags, is64, &op)) return r;
  return enqueue_ops(h, ptsz, {op});
}

CUresult batch_call(CUstream h, unsigned count, CUstreamBatchMemOpParams* params, unsigned flags,
                    bool ptsz) {
  SIMGPU_API_BEGIN();
  if (flags != 0 || count >= 256 || (count && !params)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<MemOp> ops(count);
  for (unsigned i = 0; i < count; ++i)
    if (CUresult r = make_op(params[i], &ops[i])) return r;
  return enqueue_ops(h, ptsz, std::move(ops));
}

}  // namespace

extern "C" {

#define SIMGPU_MEMOP_ENTRY_POINTS(suffix, ptsz)                                               \
  CUresult cuStreamWaitValue32##suffix(CUstream h, CUdeviceptr addr, cuuint32_t value,        \
                                       unsigned int flags) {                                  \
    return wait_value_call(h, addr, value, flags, false, ptsz);                               \
  }                                                                                           \
  CUresult cuStreamWaitValue64##suffix(CUstream h, CUdeviceptr addr, cuuint64_t value,        \
                                       unsigned int flags) {                                  \
    return wait_value_call(h, addr, value, flags, true, ptsz);                                \
  }                                                                                           \
  CUresult cuStreamWriteValue32##suffix(CUstream h, CUdeviceptr addr, cuuint32_t value,       \
                                        unsigned int flags) {                                 \
    return write_value_call(h, addr, value, flags, false, ptsz);                              \
  }                                                                                           \
  CUresult cuStreamWriteValue64##suffix(CUstream h, CUdeviceptr addr, cuuint64_t value,       \
                                        unsigned int flags) {                                 \
    return write_value_call(h, addr, value, flags, true, ptsz);                               \
  }                                                                                           \
  CUresult cuStreamBatchMemOp##suffix(CUstream h, unsigned int count,                         \
                                      CUstreamBatchMemOpParams* params, unsigned int flags) { \
    return batch_call(h, count, params, flags, ptsz);                                         \
  }

SIMGPU_MEMOP_ENTRY_POINTS(, false)
SIMGPU_MEMOP_ENTRY_POINTS(_ptsz, true)
SIMGPU_MEMOP_ENTRY_POINTS(_v2, false)
SIMGPU_MEMOP_ENTRY_POINTS(_v2_ptsz, true)
#undef SIMGPU_MEMOP_ENTRY_POINTS

}  // extern "C"
