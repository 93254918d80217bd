// Kernel of data_workers: folds a batch of rows into a running per-column state. One thread per
// column sums the rows in order, so the result is the same on a GPU and as a CPU twin.
#include "simt.h"

// state[j] = 0.5 * state[j] + 0.25 * sum_r batch[r][j] / rows   (batch is [rows][width])
extern "C" SIMT_KERNEL void dw_fold(float* state, const float* batch, int rows, int width) {
  unsigned long long j = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= static_cast<unsigned long long>(width)) return;
  float acc = 0.0f;
  for (int r = 0; r < rows; ++r) acc += batch[static_cast<long long>(r) * width + j];
  state[j] = 0.5f * state[j] + 0.25f * (acc / static_cast<float>(rows));
}
SIMT_TWIN(dw_fold)
