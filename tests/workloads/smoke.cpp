// smoke: the smallest end-to-end check of a CUDA driver: load the embedded fatbin, copy to the
// device, run two kernels, copy back, verify. Prints "smoke: OK" and exits 0, or says what
// mismatched and exits 1; CUDA errors exit 2.
#include <cstdio>
#include <vector>

#include "smoke_kernels_fatbin.h"
#include "workload_util.h"

int main(int argc, char** argv) {
  wl::Flags flags(argc, argv, "usage: smoke [--n N]   (N: elements, default 65536)");
  const int n = static_cast<int>(flags.integer("--n", 1 << 16, 1, 1 << 28));
  flags.finish();

  const wl::PrimaryContext primary;
  const CUdevice device = primary.device;
  CUmodule module = wl::load_module(embedded::smoke_kernels::fatbin);
  CUfunction axpy = wl::get_function(module, embedded::smoke_kernels::kernel::axpy);
  CUfunction iota = wl::get_function(module, embedded::smoke_kernels::kernel::smoke_iota);

  // Values whose products and sums are exact in float, whatever the rounding or contraction.
  const float a = 2.0f;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = 0.5f * static_cast<float>(i % 1024);
    y[i] = static_cast<float>(i % 4096);
  }
  const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float);
  CUdeviceptr dx, dy, dz;
  CU_CHECK(cuMemAlloc(&dx, bytes));
  CU_CHECK(cuMemAlloc(&dy, bytes));
  CU_CHECK(cuMemAlloc(&dz, bytes));
  CU_CHECK(cuMemcpyHtoD(dx, x.data(), bytes));
  CU_CHECK(cuMemcpyHtoD(dy, y.data(), bytes));
  CU_CHECK(wl::launch(axpy, wl::cover(n, 256), nullptr, dy, dx, a, n));
  CU_CHECK(wl::launch(iota, wl::cover(n, 256), nullptr, dz, n));
  std::vector<float> y_out(n), z_out(n);
  CU_CHECK(cuMemcpyDtoH(y_out.data(), dy, bytes));
  CU_CHECK(cuMemcpyDtoH(z_out.data(), dz, bytes));
  CU_CHECK(cuCtxSynchronize());

  int bad = 0;
  for (int i = 0; i < n; ++i) {
    const float want_y = y[i] + a * x[i];
    const float want_z = static_cast<float>(i);
    if (y_out[i] != want_y || z_out[i] != want_z) {
      if (++bad <= 10) {
        std::printf("smoke: mismatch at %d: axpy %g (want %g), iota %g (want %g)\n", i, y_out[i],
                    want_y, z_out[i], want_z);
      }
    }
  }
  CU_CHECK(cuMemFree(dx));
  CU_CHECK(cuMemFree(dy));
  CU_CHECK(cuMemFree(dz));
  CU_CHECK(cuModuleUnload(module));
  CU_CHECK(cuDevicePrimaryCtxRelease(device));
  if (bad > 0) {
    std::printf("smoke: FAILED, %d of %d elements wrong\n", bad, n);
    return 1;
  }
  std::printf("smoke: OK\n");
  return 0;
}
