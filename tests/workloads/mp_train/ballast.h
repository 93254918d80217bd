// --ballast-mib: device memory that makes a rank's footprint what a benchmark wants. Filled once
// (a function of the rank), then one slice rewritten per step (a function of the rank and the
// step), so an incremental checkpoint has a little to store; digest() fingerprints all of it. It
// is allocated in 2 MiB pieces, as a framework's caching allocator hands out blocks: a step
// writes one piece, not one allocation the size of the whole footprint (which a live checkpoint
// would copy whole before the first write after it).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <vector>

namespace mp {

class Ballast {
 public:
  // Allocates `mib` MiB and queues its fill on `stream`.
  Ballast(std::uint64_t mib, int rank, CUfunction write_kernel, CUstream stream);
  ~Ballast();
  Ballast(const Ballast&) = delete;
  Ballast& operator=(const Ballast&) = delete;

  // Queues step `step`'s rewrite of a kSliceWords slice on `stream`.
  void rewrite(CUstream stream, int step);
  // FNV-1a 64 over its 64-bit words, in order (read back with the stream idle).
  std::uint64_t digest() const;
  // Its words to `out` / from `in`, chunk by chunk (--state, state.h); false on a short file.
  bool save(std::FILE* out) const;
  bool load(std::FILE* in);

  static constexpr std::uint64_t kSliceWords = 8192;     // 64 KiB
  static constexpr std::uint64_t kChunkWords = 1 << 18;  // 2 MiB

 private:
  void write(CUstream stream, std::uint64_t first, std::uint64_t n, std::uint64_t seed);
  std::uint64_t seed(std::uint64_t step) const;

  CUfunction kernel_;
  int rank_;
  std::uint64_t words_;
  std::vector<CUdeviceptr> chunks_;
};

}  // namespace mp
