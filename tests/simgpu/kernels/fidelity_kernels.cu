// Kernels of simgpu's fidelity tests (tests/simgpu), written against simt.h: every one is
// deterministic, and each output element is computed by exactly one thread.
#include "fidelity_types.h"
#include "simt.h"

// x[i] = x[i] * 3 + k: applications with different k do not commute, so a sequence of them
// gives the expected result only if it runs in submission order.
SIMT_KERNEL void fid_affine(unsigned* x, unsigned k, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 3u + k;
}
SIMT_TWIN(fid_affine)

// out[i] = value, after `iters` steps of busy work per thread: a kernel that takes a while.
SIMT_KERNEL void fid_slow_fill(unsigned* out, unsigned value, int n, unsigned long long iters) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned long long h = static_cast<unsigned long long>(i);
  for (unsigned long long j = 0; j < iters; ++j)
    h = h * 6364136223846793005ull + 1442695040888963407ull;
  out[i] = h == 0x0123456789abcdefull ? ~value : value;  // keeps the loop; never true in practice
}
SIMT_TWIN(fid_slow_fill)

// a.dst[i] = a.mul * i + a.add + a.add64: a struct parameter, at offset 8, with a pointer inside.
SIMT_KERNEL void fid_struct(int n, FidStructArgs a) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a.dst[i] = a.mul * static_cast<unsigned>(i) + a.add + static_cast<unsigned>(a.add64);
}
SIMT_TWIN(fid_struct)

// x[i] = base + i, extern "C" (an unmangled name).
extern "C" SIMT_KERNEL void fid_iota(unsigned* x, unsigned base, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = base + static_cast<unsigned>(i);
}
SIMT_TWIN(fid_iota)

#if defined(__CUDACC__)
// A __device__ variable with an initializer, for cuModuleGetGlobal (twins cannot reach it).
__device__ unsigned fid_table[4] = {0x11111111u, 0x22222222u, 0x33333333u, 0x44444444u};
#endif
