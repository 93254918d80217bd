#include "ballast.h"

#include <algorithm>
#include <vector>

#include "workload_util.h"

namespace mp {

Ballast::Ballast(std::uint64_t mib, int rank, CUfunction write_kernel, CUstream stream)
    : kernel_(write_kernel), rank_(rank), words_(mib << 17) {
  CU_CHECK(cuMemAlloc(&base_, words_ * sizeof(std::uint64_t)));
  write(stream, 0, words_, seed(0));
}

Ballast::~Ballast() {
  cuMemFree(base_);
}

std::uint64_t Ballast::seed(std::uint64_t step) const {
  std::uint64_t state = (static_cast<std::uint64_t>(rank_) << 32) ^ step ^ 0xba11a57ull;
  return wl::splitmix64(state);
}

void Ballast::write(CUstream stream, std::uint64_t first, std::uint64_t n, std::uint64_t seed) {
  // A grid's x dimension stops at 2^31 - 1 blocks: a very large fill goes in parts.
  constexpr std::uint64_t kMaxLaunch = 1ull << 36;
  for (std::uint64_t at = first; at < first + n; at += kMaxLaunch) {
    const unsigned long long count = std::min(kMaxLaunch, first + n - at);
    CU_CHECK(wl::launch(kernel_, wl::cover(count), stream, base_ + at * sizeof(std::uint64_t),
                        count, static_cast<unsigned long long>(at),
                        static_cast<unsigned long long>(seed)));
  }
}

void Ballast::rewrite(CUstream stream, int step) {
  const std::uint64_t n = std::min(kSliceWords, words_);
  const std::uint64_t first = static_cast<std::uint64_t>(step) * n % (words_ - n + 1);
  write(stream, first, n, seed(static_cast<std::uint64_t>(step) + 1));
}

std::uint64_t Ballast::digest() const {
  std::vector<std::uint64_t> host(std::min<std::uint64_t>(words_, 1u << 21));  // 16 MiB at a time
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::uint64_t at = 0; at < words_; at += host.size()) {
    const std::uint64_t n = std::min<std::uint64_t>(host.size(), words_ - at);
    CU_CHECK(
        cuMemcpyDtoH(host.data(), base_ + at * sizeof(std::uint64_t), n * sizeof(std::uint64_t)));
    for (std::uint64_t i = 0; i < n; ++i) h = (h ^ host[i]) * 0x100000001b3ull;
  }
  return h;
}

}  // namespace mp
