#include "ballast.h"

#include <algorithm>
#include <vector>

#include "workload_util.h"

namespace mp {

Ballast::Ballast(std::uint64_t mib, int rank, CUfunction write_kernel, CUstream stream)
    : kernel_(write_kernel), rank_(rank), words_(mib << 17) {
  for (std::uint64_t at = 0; at < words_; at += kChunkWords) {
    CUdeviceptr chunk = 0;
    CU_CHECK(cuMemAlloc(&chunk, std::min(kChunkWords, words_ - at) * sizeof(std::uint64_t)));
    chunks_.push_back(chunk);
  }
  write(stream, 0, words_, seed(0));
}

Ballast::~Ballast() {
  for (CUdeviceptr c : chunks_) cuMemFree(c);
}

std::uint64_t Ballast::seed(std::uint64_t step) const {
  std::uint64_t state = (static_cast<std::uint64_t>(rank_) << 32) ^ step ^ 0xba11a57ull;
  return wl::splitmix64(state);
}

// Words [first, first + n), chunk by chunk; the kernel is given each word's index in the whole.
void Ballast::write(CUstream stream, std::uint64_t first, std::uint64_t n, std::uint64_t seed) {
  for (std::uint64_t at = first; at < first + n;) {
    const std::uint64_t chunk = at / kChunkWords, offset = at % kChunkWords;
    const unsigned long long count = std::min(kChunkWords - offset, first + n - at);
    CU_CHECK(wl::launch(
        kernel_, wl::cover(count), stream, chunks_[chunk] + offset * sizeof(std::uint64_t), count,
        static_cast<unsigned long long>(at), static_cast<unsigned long long>(seed)));
    at += count;
  }
}

void Ballast::rewrite(CUstream stream, int step) {
  const std::uint64_t n = std::min(kSliceWords, words_);
  const std::uint64_t first = static_cast<std::uint64_t>(step) * n % (words_ - n + 1);
  write(stream, first, n, seed(static_cast<std::uint64_t>(step) + 1));
}

std::uint64_t Ballast::digest() const {
  std::vector<std::uint64_t> host(std::min(words_, kChunkWords));
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::uint64_t at = 0; at < words_; at += kChunkWords) {
    const std::uint64_t n = std::min(kChunkWords, words_ - at);
    CU_CHECK(cuMemcpyDtoH(host.data(), chunks_[at / kChunkWords], n * sizeof(std::uint64_t)));
    for (std::uint64_t i = 0; i < n; ++i) h = (h ^ host[i]) * 0x100000001b3ull;
  }
  return h;
}

bool Ballast::save(std::FILE* out) const {
  std::vector<std::uint64_t> host(std::min(words_, kChunkWords));
  for (std::uint64_t at = 0; at < words_; at += kChunkWords) {
    const std::uint64_t n = std::min(kChunkWords, words_ - at);
    CU_CHECK(cuMemcpyDtoH(host.data(), chunks_[at / kChunkWords], n * sizeof(std::uint64_t)));
    if (std::fwrite(host.data(), sizeof(std::uint64_t), n, out) != n) return false;
  }
  return true;
}

bool Ballast::load(std::FILE* in) {
  std::vector<std::uint64_t> host(std::min(words_, kChunkWords));
  for (std::uint64_t at = 0; at < words_; at += kChunkWords) {
    const std::uint64_t n = std::min(kChunkWords, words_ - at);
    if (std::fread(host.data(), sizeof(std::uint64_t), n, in) != n) return false;
    CU_CHECK(cuMemcpyHtoD(chunks_[at / kChunkWords], host.data(), n * sizeof(std::uint64_t)));
  }
  return true;
}

}  // namespace mp
