// interpose_bench_probe: the timed loops of bench_interpose (bench/interpose_overhead.cpp), which
// runs this program directly on a driver and again under gcr and compares. A workload (so that it
// can live beside the kernels it embeds); it measures, it checks nothing.
//
//   interpose_bench_probe [--iters N] [--reps R]
//
// Prints, per measured call, one line of R samples, each the mean nanoseconds per call over N
// back-to-back calls on one stream (the stream is drained between samples, outside the timing):
//   launch_empty_ns 41.2 40.8 ...     cuLaunchKernel of a kernel without parameters, 1 thread
//   launch_args_ns ...                cuLaunchKernel of a kernel with (unsigned*, int, unsigned)
//   memcpy_async_ns ...               cuMemcpyHtoDAsync of 4 bytes from pinned memory
// and `libcuda <path>`: the library whose cuInit this process called.
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "bench_kernels_fatbin.h"
#include "workload_util.h"

namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
void measure(const char* name, long iters, int reps, CUstream stream, F call) {
  for (long i = 0; i < 1000; ++i) CU_CHECK(call());  // warm: caches, lazily resolved entry points
  CU_CHECK(cuStreamSynchronize(stream));
  std::printf("%s", name);
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    for (long i = 0; i < iters; ++i) {
      CUresult res = call();
      if (res != CUDA_SUCCESS) CU_CHECK(res);
    }
    auto t1 = Clock::now();
    CU_CHECK(cuStreamSynchronize(stream));
    std::printf(" %.2f", std::chrono::duration<double, std::nano>(t1 - t0).count() /
                             static_cast<double>(iters));
    std::fflush(stdout);
  }
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  wl::Flags flags(argc, argv, "usage: interpose_bench_probe [--iters N] [--reps R]");
  const long iters = static_cast<long>(flags.integer("--iters", 200000, 1, 1'000'000'000));
  const int reps = static_cast<int>(flags.integer("--reps", 5, 1, 1000));
  flags.finish();

  CU_CHECK(cuInit(0));
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cuInit), &info) && info.dli_fname)
    std::printf("libcuda %s\n", info.dli_fname);
  CUdevice device;
  CU_CHECK(cuDeviceGet(&device, 0));
  CUcontext context;
  CU_CHECK(cuDevicePrimaryCtxRetain(&context, device));
  CU_CHECK(cuCtxSetCurrent(context));
  CUmodule module = wl::load_module(embedded::bench_kernels::fatbin);
  CUfunction empty = wl::get_function(module, embedded::bench_kernels::kernel::bench_empty);
  CUfunction with_args = wl::get_function(module, embedded::bench_kernels::kernel::bench_args);
  CUstream stream;
  CU_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr x;
  CU_CHECK(cuMemAlloc(&x, 4096));
  void* pinned = nullptr;
  CU_CHECK(cuMemAllocHost(&pinned, 4));
  *static_cast<unsigned*>(pinned) = 7;

  void* no_params[] = {nullptr};
  measure("launch_empty_ns", iters, reps, stream,
          [&] { return cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, stream, no_params, nullptr); });
  int n = 1;
  unsigned k = 3;
  void* params[] = {&x, &n, &k};
  measure("launch_args_ns", iters, reps, stream,
          [&] { return cuLaunchKernel(with_args, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr); });
  measure("memcpy_async_ns", iters, reps, stream,
          [&] { return cuMemcpyHtoDAsync(x, pinned, 4, stream); });

  CU_CHECK(cuStreamDestroy(stream));
  CU_CHECK(cuMemFreeHost(pinned));
  CU_CHECK(cuMemFree(x));
  return 0;
}
