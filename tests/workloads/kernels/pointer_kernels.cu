// Kernels of the pointer_table workload: one that writes through device pointers stored in device
// memory (a table of buffers), which gcr's speculative write tracking cannot see from its
// parameters (`float* const*`: a pointer to const pointers, so the table itself is read only).
#include "simt.h"

// table[t][i] += 1 for every buffer t.
SIMT_KERNEL void add_through_table(float* const* table, int tables, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  for (int t = 0; t < tables; ++t) simt_follow_ptr(table[t])[i] += 1.0f;
}
SIMT_TWIN(add_through_table)
