// context_only: a CUDA program that holds a context and no device memory (a launcher, a process
// that has freed everything), calling the driver every step. Prints mlp_train's step lines and,
// at the end, "checksum" of the steps it took, so that the checkpoint tests can follow it.
#include <cinttypes>
#include <cstdio>
#include <thread>

#include "workload_util.h"

int main(int argc, char** argv) {
  wl::ms_since_start();
  wl::Flags flags(argc, argv, "usage: context_only [--steps N] [--step-delay-ms M]");
  const int steps = static_cast<int>(flags.integer("--steps", 200, 1, 10'000'000));
  const int delay = static_cast<int>(flags.integer("--step-delay-ms", 20, 0, 3'600'000));
  flags.finish();
  const wl::PrimaryContext primary;
  const CUdevice device = primary.device;
  std::uint64_t h = 1469598103934665603ull;
  for (int step = 0; step < steps; ++step) {
    CU_CHECK(cuCtxSynchronize());
    std::size_t free_bytes = 0, total = 0;
    CU_CHECK(cuMemGetInfo(&free_bytes, &total));
    h = (h ^ static_cast<std::uint64_t>(step)) * 1099511628211ull;
    std::printf("step %d loss 0 t_ms %.1f\n", step, wl::ms_since_start());
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay));
  }
  std::printf("checksum %016" PRIx64 "\n", h);
  CU_CHECK(cuDevicePrimaryCtxRelease(device));
  return 0;
}
