// Kernels of the interposer tests (tests/interpose), written against simt.h. Each has the
// parameter shape one write-tracking rule is about (Note [Write tracking] in interpose/launch.cpp).
#include "probe_types.h"
#include "simt.h"

// x[i] = probe_word(seed, i).
SIMT_KERNEL void probe_fill(unsigned* x, unsigned seed, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = probe_word(seed, static_cast<unsigned>(i));
}
SIMT_TWIN(probe_fill)

// x[i] += k.
SIMT_KERNEL void probe_add(unsigned* x, unsigned k, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += k;
}
SIMT_TWIN(probe_add)

// dst[i] = src[i] + 1: a C++ kernel whose source is a pointer to const (a read under
// GCR_TRACK=speculative).
SIMT_KERNEL void probe_copy(unsigned* dst, const unsigned* src, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = src[i] + 1u;
}
SIMT_TWIN(probe_copy)

// The same as extern "C": no demangled types, so both pointers count as writes.
extern "C" SIMT_KERNEL void probe_c_copy(unsigned* dst, const unsigned* src, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = src[i] + 1u;
}
SIMT_TWIN(probe_c_copy)

// a.dst[i] = a.value + i: the only pointer is inside a struct parameter.
SIMT_KERNEL void probe_struct(int n, ProbeStructArgs a) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a.dst[i] = a.value + static_cast<unsigned>(i);
}
SIMT_TWIN(probe_struct)

// Writes nothing: no pointer parameters (an 8-byte one that is not an address).
SIMT_KERNEL void probe_nop(int n, unsigned long long salt) {}
SIMT_TWIN(probe_nop)
