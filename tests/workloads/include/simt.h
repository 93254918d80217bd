// simt.h: write a CUDA kernel once, compile it twice.
//
// nvcc compiles a kernel file for the GPU (the fatbin a workload embeds and loads through the
// driver API). The host compiler compiles the same file as C++ and gets the kernel's CPU twin,
// which simgpu runs when the program loads that fatbin on the simulated GPU.
//
//   SIMT_KERNEL void axpy(float* y, const float* x, float a, int n) {
//     int i = blockIdx.x * blockDim.x + threadIdx.x;
//     if (i < n) y[i] += a * x[i];
//   }
//   SIMT_TWIN(axpy)
//
// The twin contract (tools/simgpu/twin.h reads it): for a kernel whose demangled name is N
// (C++ or extern "C", at namespace scope, not overloaded), the host build exports
//   extern "C" void simgpu_twin__N(const SimtLaunch* launch, void** params);
// simgpu finds it with dlsym, so link the program with ENABLE_EXPORTS (-rdynamic). params[i]
// points at the i-th argument, already translated so that device pointers are host-usable.
//
// Bit-identical results on both backends need exactly rounded arithmetic: nvcc --fmad=false and
// host -ffp-contract=off (gcr_add_workload sets both), and no transcendental functions. Prefix
// extern "C" kernel names: they are exported from the program and could interpose other symbols.
//
// Limits of a twin: threads of a block run one after another on one CPU thread, so a kernel may
// not use __syncthreads(), shared memory, warp intrinsics or atomics that order threads. Each
// output element must be computed by exactly one thread (which is also what makes results
// deterministic on both backends).
//
// Flags shared with another process, another stream or the host (system scope), for T one of
// unsigned and unsigned long long:
//   T    simt_load_acquire_sys(const T* p)      an acquire load
//   void simt_store_release_sys(T* p, T v)      a release store: what this thread wrote before
//                                               is visible to whoever acquires v
//   T    simt_spin_geq(const T* p, T v)         waits until (signed)(*p - v) >= 0 (the cyclic >=
//                                               of cuStreamWaitValue's GEQ), acquires, returns *p
// A kernel may spin on a flag that another process, another stream's kernel or memory operation,
// or the host sets; never on one that another block of its own grid sets: a GPU does not promise
// that the blocks of a grid run at once, and a twin runs them one after another. simgpu runs each
// stream on a thread of its own, so a twin spinning on stream A does not hold up stream B.
// (On a GPU: libcu++'s cuda::atomic_ref at thread_scope_system; in a twin: std::atomic_ref.)
//
// Device pointers stored in device memory: a twin receives its pointer arguments translated to
// where the simulator maps device memory, but a device address it reads from memory (a table of
// pointers written by the host, a peer's buffer address) is a raw device address, which a host
// thread cannot dereference. Pass it through simt_follow_ptr before using it; simt_device_addr
// is the inverse, for a pointer the kernel holds and stores into memory for others to follow.
// Both are the identity on a GPU.
//   T* simt_follow_ptr(T* device_address)
//   T* simt_device_addr(T* usable_pointer)
#pragma once

#if defined(__CUDACC__)

#define SIMT_KERNEL __global__
#define SIMT_DEVICE static __device__ __forceinline__
#define SIMT_TWIN(name)

#if __has_include(<cuda/atomic>)
#include <cuda/atomic>
#define SIMT_SYS_ATOMICS(T)                                                                       \
  SIMT_DEVICE T simt_load_acquire_sys(const T* p) {                                               \
    return cuda::atomic_ref<T, cuda::thread_scope_system>(*const_cast<T*>(p))                     \
        .load(cuda::std::memory_order_acquire);                                                   \
  }                                                                                               \
  SIMT_DEVICE void simt_store_release_sys(T* p, T v) {                                            \
    cuda::atomic_ref<T, cuda::thread_scope_system>(*p).store(v, cuda::std::memory_order_release); \
  }
SIMT_SYS_ATOMICS(unsigned)
SIMT_SYS_ATOMICS(unsigned long long)
#undef SIMT_SYS_ATOMICS
#else  // no libcu++: the PTX it would emit (sm_70 and later)
SIMT_DEVICE unsigned simt_load_acquire_sys(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
SIMT_DEVICE unsigned long long simt_load_acquire_sys(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
SIMT_DEVICE void simt_store_release_sys(unsigned* p, unsigned v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
SIMT_DEVICE void simt_store_release_sys(unsigned long long* p, unsigned long long v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
#endif

SIMT_DEVICE unsigned simt_spin_geq(const unsigned* p, unsigned v) {
  unsigned seen;
  while (static_cast<int>((seen = simt_load_acquire_sys(p)) - v) < 0) __nanosleep(256);
  return seen;
}
SIMT_DEVICE unsigned long long simt_spin_geq(const unsigned long long* p, unsigned long long v) {
  unsigned long long seen;
  while (static_cast<long long>((seen = simt_load_acquire_sys(p)) - v) < 0) __nanosleep(256);
  return seen;
}
template <typename T>
SIMT_DEVICE T* simt_follow_ptr(T* device_address) {
  return device_address;
}
template <typename T>
SIMT_DEVICE T* simt_device_addr(T* usable_pointer) {
  return usable_pointer;
}

#else  // host compiler: the CPU twin

#include <math.h>
#include <sched.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

struct SimtDim3 {
  unsigned x = 1, y = 1, z = 1;
};

// Layout shared with tools/simgpu/twin.h: do not reorder. simgpu may run a grid in pieces on
// several CPU threads: a call runs the blocks whose linear index lies in
// [block_begin, block_end); block_end == 0 means every block.
struct SimtLaunch {
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_bytes;
  unsigned block_begin;
  unsigned block_end;
  long long alias_delta;  // device address + alias_delta = where this twin reaches it
};

namespace simt {
inline thread_local SimtDim3 threadIdx, blockIdx, blockDim, gridDim;
inline thread_local long long alias_delta;

template <typename... Args, std::size_t... I>
void run_twin(void (*kernel)(Args...), const SimtLaunch* l, void** params,
              std::index_sequence<I...>) {
  alias_delta = l->alias_delta;
  gridDim = {l->grid[0], l->grid[1], l->grid[2]};
  blockDim = {l->block[0], l->block[1], l->block[2]};
  const unsigned long long blocks = 1ull * l->grid[0] * l->grid[1] * l->grid[2];
  const unsigned long long end = l->block_end ? l->block_end : blocks;
  for (unsigned long long b = l->block_begin; b < end && b < blocks; ++b) {
    blockIdx = {unsigned(b % l->grid[0]), unsigned(b / l->grid[0] % l->grid[1]),
                unsigned(b / (1ull * l->grid[0] * l->grid[1]))};
    for (unsigned tz = 0; tz < l->block[2]; ++tz)
      for (unsigned ty = 0; ty < l->block[1]; ++ty)
        for (unsigned tx = 0; tx < l->block[0]; ++tx) {
          threadIdx = {tx, ty, tz};
          kernel(*static_cast<std::remove_reference_t<Args>*>(params[I])...);
        }
  }
}

template <typename... Args>
void run_twin(void (*kernel)(Args...), const SimtLaunch* l, void** params) {
  run_twin(kernel, l, params, std::index_sequence_for<Args...>{});
}
}  // namespace simt

using simt::blockDim;
using simt::blockIdx;
using simt::gridDim;
using simt::threadIdx;

namespace simt {
// Spinning on a CPU: first busy, then yielding, then sleeping up to 50 us between looks, so that
// a twin waiting for another thread or process leaves it the CPU.
inline void backoff(unsigned& spins) {
  if (++spins < 64) return;
  if (spins < 128) {
    sched_yield();
    return;
  }
  timespec pause{0, spins - 127 < 50 ? 1000L * (spins - 127) : 50000L};
  nanosleep(&pause, nullptr);
}
}  // namespace simt

template <typename T>
static inline T simt_load_acquire_sys(const T* p) {
  static_assert(std::is_same_v<T, unsigned> || std::is_same_v<T, unsigned long long>);
  return std::atomic_ref<T>(*const_cast<T*>(p)).load(std::memory_order_acquire);
}
template <typename T>
static inline void simt_store_release_sys(T* p, std::type_identity_t<T> v) {
  static_assert(std::is_same_v<T, unsigned> || std::is_same_v<T, unsigned long long>);
  std::atomic_ref<T>(*p).store(v, std::memory_order_release);
}
template <typename T>
static inline T simt_spin_geq(const T* p, std::type_identity_t<T> v) {
  T seen;
  unsigned spins = 0;
  while (static_cast<std::make_signed_t<T> >((seen = simt_load_acquire_sys(p)) - v) < 0)
    simt::backoff(spins);
  return seen;
}
template <typename T>
static inline T* simt_follow_ptr(T* device_address) {
  if (!device_address) return nullptr;
  return reinterpret_cast<T*>(reinterpret_cast<std::uintptr_t>(device_address) +
                              static_cast<std::uintptr_t>(simt::alias_delta));
}
template <typename T>
static inline T* simt_device_addr(T* usable_pointer) {
  if (!usable_pointer) return nullptr;
  return reinterpret_cast<T*>(reinterpret_cast<std::uintptr_t>(usable_pointer) -
                              static_cast<std::uintptr_t>(simt::alias_delta));
}

#define SIMT_KERNEL
#define SIMT_DEVICE static inline
#define __restrict__ __restrict
#define SIMT_TWIN(name)                                                             \
  extern "C" __attribute__((visibility("default"), used)) void simgpu_twin__##name( \
      const SimtLaunch* launch, void** params) {                                    \
    ::simt::run_twin(&name, launch, params);                                        \
  }

#endif
