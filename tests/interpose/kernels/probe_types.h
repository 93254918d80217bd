// Types and the data pattern shared by the interposer tests' kernels (probe_kernels.cu) and the
// host code that launches them and checks their results.
#pragma once

#if defined(__CUDACC__)
#define PROBE_HOST_DEVICE __host__ __device__
#else
#define PROBE_HOST_DEVICE
#endif

// A kernel parameter passed by value with a device pointer inside (at offset 0 of 24 bytes), so
// that write tracking must find the pointer in the struct's words.
struct ProbeStructArgs {
  unsigned* dst;
  unsigned value;
  unsigned pad;
  unsigned long long salt;
};
static_assert(sizeof(ProbeStructArgs) == 24 && alignof(ProbeStructArgs) == 8);

// Word i of the pattern `seed`: what probe_fill writes and the tests expect.
PROBE_HOST_DEVICE inline unsigned probe_word(unsigned seed, unsigned i) {
  unsigned x = seed * 0x9e3779b9u + i * 2654435761u;
  return x ^ (x >> 15) ^ 0xa5a5a5a5u;
}
