// bench/gpu/platform_probe.cu: the platform's figures, once, driver API only (no kernels), so that
// the kit's other numbers can be read against them. Prints "@kit key=value" lines for
// bench/gpu/summarize.py and a human line for each.
//
//   nvcc -O2 -o platform_probe bench/gpu/platform_probe.cu -lcuda   (on the GPU machine)
//   g++ -O2 -x c++ -I/usr/local/cuda/include bench/gpu/platform_probe.cu -lcuda   (anywhere;
//   simgpu)
//
// Figures: cuInit and primary-context times; host-to-device and device-to-host bandwidth from
// pinned (cuMemHostAlloc) and pageable (malloc) memory; device-to-device copy bandwidth. Each
// bandwidth is the best of --reps copies of --size bytes (default 1 GiB; D2D copies the same size).
#include <cuda.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* name = "?";
  cuGetErrorName(r, &name);
  std::fprintf(stderr, "platform_probe: %s: %s\n", what, name);
  std::exit(1);
}
#define CK(x) check((x), #x)

size_t parse_size(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (end && *end ? *end : ' ') {
    case 'G':
    case 'g':
      v *= 1 << 30;
      break;
    case 'M':
    case 'm':
      v *= 1 << 20;
      break;
    case 'K':
    case 'k':
      v *= 1 << 10;
      break;
  }
  return static_cast<size_t>(v);
}

template <class F>
double best_gbps(size_t bytes, int reps, F copy) {
  double best_ms = 1e300;
  copy();  // warm-up
  for (int i = 0; i < reps; ++i) {
    auto t = Clock::now();
    copy();
    double ms = ms_since(t);
    if (ms < best_ms) best_ms = ms;
  }
  return static_cast<double>(bytes) / (best_ms * 1e-3) / 1e9;
}
}  // namespace

int main(int argc, char** argv) {
  size_t size = size_t(1) << 30;
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--size") && i + 1 < argc)
      size = parse_size(argv[++i]);
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: platform_probe [--size BYTES] [--reps N]\n");
      return 2;
    }
  }
  auto t0 = Clock::now();
  CK(cuInit(0));
  double init_ms = ms_since(t0);
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  char name[256] = {};
  CK(cuDeviceGetName(name, sizeof name, dev));
  int drv = 0;
  CK(cuDriverGetVersion(&drv));
  size_t total = 0;
  CK(cuDeviceTotalMem(&total, dev));
  auto t1 = Clock::now();
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CK(cuCtxSynchronize());
  double ctx_ms = ms_since(t1);
  for (char* p = name; *p; ++p)
    if (*p == ' ') *p = '_';
  std::printf("@kit device=%s driver_version=%d device_mem_gib=%.1f\n", name, drv,
              total / double(1 << 30));
  std::printf("@kit cuinit_ms=%.1f primary_ctx_ms=%.1f\n", init_ms, ctx_ms);

  CUdeviceptr d1, d2;
  CK(cuMemAlloc(&d1, size));
  CK(cuMemAlloc(&d2, size));
  void* pinned = nullptr;
  CK(cuMemHostAlloc(&pinned, size, 0));
  void* pageable = std::malloc(size);
  if (!pageable) return 1;
  std::memset(pinned, 1, size);
  std::memset(pageable, 2, size);

  double h2d_pinned = best_gbps(size, reps, [&] { CK(cuMemcpyHtoD(d1, pinned, size)); });
  double d2h_pinned = best_gbps(size, reps, [&] { CK(cuMemcpyDtoH(pinned, d1, size)); });
  double h2d_pageable = best_gbps(size, reps, [&] { CK(cuMemcpyHtoD(d1, pageable, size)); });
  double d2h_pageable = best_gbps(size, reps, [&] { CK(cuMemcpyDtoH(pageable, d1, size)); });
  double d2d = best_gbps(size, reps, [&] {
    CK(cuMemcpyDtoD(d2, d1, size));
    CK(cuCtxSynchronize());
  });
  std::printf(
      "@kit copy_bytes=%zu h2d_pinned_gbps=%.2f d2h_pinned_gbps=%.2f h2d_pageable_gbps=%.2f "
      "d2h_pageable_gbps=%.2f d2d_gbps=%.2f\n",
      size, h2d_pinned, d2h_pinned, h2d_pageable, d2h_pageable, d2d);
  std::printf(
      "%s, driver %d: cuInit %.1f ms, primary context %.1f ms; GB/s H2D pinned %.2f pageable %.2f, "
      "D2H pinned %.2f pageable %.2f, D2D %.2f\n",
      name, drv, init_ms, ctx_ms, h2d_pinned, h2d_pageable, d2h_pinned, d2h_pageable, d2d);
  std::free(pageable);
  CK(cuMemFreeHost(pinned));
  CK(cuMemFree(d1));
  CK(cuMemFree(d2));
  CK(cuDevicePrimaryCtxRelease(dev));
  return 0;
}
