// The Debian/Ubuntu multiarch library directory of the architecture gcr is built for, where the
// NVIDIA driver's packages put libcuda.so.1 (/usr/lib/x86_64-linux-gnu, /usr/lib/aarch64-linux-gnu
// on arm64 hosts such as GH200). A string literal, to be pasted before a file name:
//   GCR_MULTIARCH_LIBDIR "/libcuda.so.1"
#pragma once

#if defined(__x86_64__)
#define GCR_MULTIARCH_LIBDIR "/usr/lib/x86_64-linux-gnu"
#elif defined(__aarch64__)
#define GCR_MULTIARCH_LIBDIR "/usr/lib/aarch64-linux-gnu"
#else
#error "gcr builds for x86-64 and aarch64 only (gcr/multiarch.h)"
#endif
