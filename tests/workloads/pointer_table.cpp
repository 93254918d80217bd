// pointer_table: a program whose kernel writes through device pointers stored in device memory,
// the case gcr's speculative write tracking cannot see (Note [Validating write tracking] in
// interpose/validate.h). Two buffers of --bytes each, a device table holding their addresses;
// every step adds 1 to every element of both through the table, prints "step K", and sleeps
// --step-delay-ms. At the end every element must equal --steps: "pointer_table: OK", else
// "pointer_table: MISMATCH ..." (exit 1). CUDA errors exit 2.
#include <unistd.h>

#include <cstdio>
#include <vector>

#include "pointer_kernels_fatbin.h"
#include "workload_util.h"

int main(int argc, char** argv) {
  wl::Flags flags(argc, argv,
                  "usage: pointer_table [--steps N] [--step-delay-ms MS] [--bytes BYTES]");
  const int steps = static_cast<int>(flags.integer("--steps", 100, 1, 1 << 20));
  const int delay_ms = static_cast<int>(flags.integer("--step-delay-ms", 10, 0, 60000));
  const std::uint64_t bytes = flags.bytes("--bytes", 4ull << 20);
  flags.finish();

  const wl::PrimaryContext primary;  // cuInit, device 0, its primary context
  CUmodule module = wl::load_module(embedded::pointer_kernels::fatbin);
  CUfunction add = wl::get_function(module, embedded::pointer_kernels::kernel::add_through_table);

  const int n = static_cast<int>(bytes / sizeof(float));
  CUdeviceptr buffers[2], table;
  for (CUdeviceptr& b : buffers) {
    CU_CHECK(cuMemAlloc(&b, bytes));
    CU_CHECK(cuMemsetD32(b, 0, n));
  }
  CU_CHECK(cuMemAlloc(&table, sizeof buffers));
  CU_CHECK(cuMemcpyHtoD(table, buffers, sizeof buffers));
  for (int k = 1; k <= steps; ++k) {
    CU_CHECK(wl::launch(add, wl::cover(n, 256), nullptr, table, 2, n));
    CU_CHECK(cuCtxSynchronize());
    std::printf("step %d\n", k);
    std::fflush(stdout);
    if (delay_ms > 0) usleep(static_cast<useconds_t>(delay_ms) * 1000);
  }
  std::vector<float> host(n);
  for (int t = 0; t < 2; ++t) {
    CU_CHECK(cuMemcpyDtoH(host.data(), buffers[t], bytes));
    for (int i = 0; i < n; ++i) {
      if (host[i] != static_cast<float>(steps)) {
        std::printf("pointer_table: MISMATCH buffer %d [%d] = %g, want %d\n", t, i, host[i], steps);
        return 1;
      }
    }
  }
  std::printf("pointer_table: OK\n");
  return 0;
}
