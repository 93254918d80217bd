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

// One thread writes data[0..n) = seed * 2654435761 + i, then publishes `value` in *flag with a
// system-scope release: a reader that acquires the value sees all of data.
SIMT_KERNEL void fid_publish(unsigned* data, int n, unsigned seed, unsigned* flag, unsigned value) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  for (int i = 0; i < n; ++i) data[i] = seed * 2654435761u + static_cast<unsigned>(i);
  simt_store_release_sys(flag, value);
}
SIMT_TWIN(fid_publish)

// One thread spins until *flag >= value (set by another stream or process), then copies data to
// out: it must see what the flag's writer wrote before its release.
SIMT_KERNEL void fid_wait_copy(const unsigned* flag, unsigned value, const unsigned* data,
                               unsigned* out, int n) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  simt_spin_geq(flag, value);
  for (int i = 0; i < n; ++i) out[i] = data[i];
}
SIMT_TWIN(fid_wait_copy)

// out[t * n + i] = tables[t][i]: the tables' addresses are read from device memory, as a kernel
// that follows a peer's buffer pointer does.
SIMT_KERNEL void fid_follow(unsigned* const* tables, int count, int n, unsigned* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count * n) return;
  const unsigned* table = simt_follow_ptr(tables[i / n]);
  out[i] = table[i % n];
}
SIMT_TWIN(fid_follow)
