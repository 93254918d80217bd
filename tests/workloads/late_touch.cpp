// late_touch: the on-demand restore's test subject. It fills a large buffer B (allocated first, so
// that a restore without a recorded first-touch order loads it first) and a small A and C
// (allocated after, in one slab; --small-first fills them before B), prints
// "ready", and waits until the file --go names exists. Then it touches, timing each step:
//   1. A (an axpy from A into C, then C copied back): its region may not have arrived yet;
//   2. B (copied back whole): the large region, usually the last to arrive;
//   3. A again: loaded by then, so it must not wait.
// Each step prints "touch <what> wait_ms <ms>" and checks the bytes; "late_touch: OK" at the end,
// or what mismatched (exit 1). CUDA errors exit 2.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "smoke_kernels_fatbin.h"
#include "workload_util.h"

namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

bool exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  wl::Flags flags(argc, argv,
                  "usage: late_touch --go FILE [--big BYTES] [--small-first]\n"
                  "  --big BYTES    size of B (default 64M)\n"
                  "  --small-first  fill A and C before B (B is always allocated first)");
  const std::string go = flags.text("--go", "");
  const std::uint64_t big = flags.bytes("--big", 64ull << 20);
  const bool small_first = flags.boolean("--small-first");
  flags.finish();
  if (go.empty()) flags.error("--go FILE is required");

  const wl::PrimaryContext primary;
  const CUdevice device = primary.device;
  CUmodule module = wl::load_module(embedded::smoke_kernels::fatbin);
  CUfunction axpy = wl::get_function(module, embedded::smoke_kernels::kernel::axpy);
  CUfunction iota = wl::get_function(module, embedded::smoke_kernels::kernel::smoke_iota);

  const int nb = static_cast<int>(big / sizeof(float));
  const int ns = 4096;
  CUdeviceptr b, a, c;
  CU_CHECK(cuMemAlloc(&b, big));
  CU_CHECK(cuMemAlloc(&a, ns * sizeof(float)));
  CU_CHECK(cuMemAlloc(&c, ns * sizeof(float)));
  // The first touches, in an order a checkpoint records (Note [First-touch order]).
  if (!small_first) CU_CHECK(wl::launch(iota, wl::cover(nb, 256), nullptr, b, nb));
  CU_CHECK(wl::launch(iota, wl::cover(ns, 256), nullptr, a, ns));
  CU_CHECK(cuMemsetD32(c, 0, ns));
  if (small_first) CU_CHECK(wl::launch(iota, wl::cover(nb, 256), nullptr, b, nb));
  CU_CHECK(cuCtxSynchronize());
  std::printf("ready\n");
  std::fflush(stdout);
  while (!exists(go)) usleep(20'000);

  int bad = 0;
  std::vector<float> host_c(ns);
  auto touch_a = [&](const char* what, float want_scale) {
    auto t = std::chrono::steady_clock::now();
    CU_CHECK(wl::launch(axpy, wl::cover(ns, 256), nullptr, c, a, 1.0f, ns));
    CU_CHECK(cuMemcpyDtoH(host_c.data(), c, ns * sizeof(float)));
    std::printf("touch %s wait_ms %.1f\n", what, ms_since(t));
    for (int i = 0; i < ns; ++i)
      if (host_c[i] != want_scale * static_cast<float>(i) && ++bad <= 5)
        std::printf("mismatch: %s: c[%d] = %g, want %g\n", what, i, host_c[i],
                    want_scale * static_cast<float>(i));
  };
  touch_a("A", 1.0f);
  {
    std::vector<float> host_b(nb);
    auto t = std::chrono::steady_clock::now();
    CU_CHECK(cuMemcpyDtoH(host_b.data(), b, big));
    std::printf("touch B wait_ms %.1f\n", ms_since(t));
    for (int i = 0; i < nb; ++i)
      if (host_b[i] != static_cast<float>(i) && ++bad <= 10)
        std::printf("mismatch: B[%d] = %g, want %d\n", i, host_b[i], i);
  }
  touch_a("A-again", 2.0f);
  std::fflush(stdout);
  CU_CHECK(cuModuleUnload(module));
  CU_CHECK(cuDevicePrimaryCtxRelease(device));
  if (bad) {
    std::printf("late_touch: FAILED, %d values wrong\n", bad);
    return 1;
  }
  std::printf("late_touch: OK\n");
  return 0;
}
