// Kernels of infer_server: a table built from the weights at warm-up, and the digest every answer
// is made of (each of `parts` threads folds its stripe of the weights, in order, into one word).
// Integer arithmetic only: the GPU and the CPU twin agree bit for bit.
#include "simt.h"

SIMT_DEVICE unsigned long long infer_mix(unsigned long long h, unsigned long long v) {
  h ^= v;
  h *= 0x100000001b3ull;
  return h ^ (h >> 29);
}

// table[t] folds every `stride`-th weight from t * stride on: a sample of all of them.
extern "C" SIMT_KERNEL void infer_table(const unsigned long long* w, unsigned long long n,
                                        unsigned long long* table, int entries) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= entries) return;
  unsigned long long h = 0xcbf29ce484222325ull ^ static_cast<unsigned long long>(t);
  const unsigned long long stride = static_cast<unsigned long long>(entries);
  for (unsigned long long i = static_cast<unsigned long long>(t); i < n; i += stride * 61)
    h = infer_mix(h, w[i]);
  table[t] = h;
}
SIMT_TWIN(infer_table)

// partials[p] folds weights [n*p/parts, n*(p+1)/parts) with the request's seed and a table entry.
extern "C" SIMT_KERNEL void infer_digest(const unsigned long long* w, unsigned long long n,
                                         unsigned long long seed, const unsigned long long* table,
                                         int entries, unsigned long long* partials, int parts) {
  int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= parts) return;
  const unsigned long long lo = n * static_cast<unsigned long long>(p) / parts;
  const unsigned long long hi = n * static_cast<unsigned long long>(p + 1) / parts;
  unsigned long long h = infer_mix(seed * 0x9e3779b97f4a7c15ull, table[p % entries]);
  for (unsigned long long i = lo; i < hi; ++i) h = infer_mix(h, w[i]);
  partials[p] = h;
}
SIMT_TWIN(infer_digest)
