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
#pragma once

#if defined(__CUDACC__)

#define SIMT_KERNEL __global__
#define SIMT_DEVICE static __device__ __forceinline__
#define SIMT_TWIN(name)

#else  // host compiler: the CPU twin

#include <math.h>

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
};

namespace simt {
inline thread_local SimtDim3 threadIdx, blockIdx, blockDim, gridDim;

template <typename... Args, std::size_t... I>
void run_twin(void (*kernel)(Args...), const SimtLaunch* l, void** params,
              std::index_sequence<I...>) {
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

#define SIMT_KERNEL
#define SIMT_DEVICE static inline
#define __restrict__ __restrict
#define SIMT_TWIN(name)                                                             \
  extern "C" __attribute__((visibility("default"), used)) void simgpu_twin__##name( \
      const SimtLaunch* launch, void** params) {                                    \
    ::simt::run_twin(&name, launch, params);                                        \
  }

#endif
