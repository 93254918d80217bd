// Kernels of the interposer overhead benchmark (bench/interpose_overhead.cpp runs
// interpose_bench_probe): an empty kernel, and one whose parameters write tracking has to read.
#include "simt.h"

// Does nothing, takes nothing: the launch path alone.
SIMT_KERNEL void bench_empty() {}
SIMT_TWIN(bench_empty)

// x[0] = k when n > 0, from thread 0 only: a pointer, an int and a word for the tracker to scan.
SIMT_KERNEL void bench_args(unsigned* x, int n, unsigned k) {
  if (n > 0 && blockIdx.x == 0 && threadIdx.x == 0) x[0] = k;
}
SIMT_TWIN(bench_args)
