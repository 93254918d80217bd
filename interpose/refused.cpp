// The driver entry points gcr refuses (forwarding_rule.py's REFUSED, Note [What may pass the gate
// unwrapped]): each is a generated stub that tail-calls gcr_refused_call with its index, which
// says so once per name and returns CUDA_ERROR_NOT_SUPPORTED. The stubs' signatures differ, but
// every driver entry point returns a CUresult in %eax, which is all this writes.
#include <atomic>
#include <cstdint>
#include <cstdio>

#include "real_driver.h"

namespace {
constexpr unsigned kMaxSymbols = 4096;
std::atomic<std::uint64_t> g_said[kMaxSymbols / 64];
}  // namespace

extern "C" __attribute__((visibility("hidden"))) CUresult gcr_refused_call(unsigned index) {
  const std::uint64_t bit = std::uint64_t{1} << (index % 64);
  if (index < kMaxSymbols && !(g_said[index / 64].fetch_or(bit, std::memory_order_relaxed) & bit)) {
    const char* name = gcr::interpose::symbol_name(index);
    std::fprintf(stderr,
                 "gcr: %s is an entry point of the driver's first ABI (32-bit device pointers, "
                 "CUDA 3.1 and older), which gcr does not carry; the program is told "
                 "CUDA_ERROR_NOT_SUPPORTED. Rebuild it against a current cuda.h\n",
                 name ? name : "a driver entry point");
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}
