// Kernels of the smoke workload: one C++ kernel (mangled name, const pointer parameter) and one
// extern "C" kernel, so that both ways of naming a kernel get exercised.
#include "simt.h"

// y[i] += a * x[i]
SIMT_KERNEL void axpy(float* y, const float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
SIMT_TWIN(axpy)

// x[i] = i. extern "C" names are exported from the program as they are: keep them distinctive.
extern "C" SIMT_KERNEL void smoke_iota(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = static_cast<float>(i);
}
SIMT_TWIN(smoke_iota)
