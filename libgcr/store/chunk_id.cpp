// Chunk, checkpoint and pack ids (gcr/chunk_id.h) and the hashes behind them (hash.h). The one file
// that compiles xxHash inline, so that every caller gets the vectorised XXH3 without linking it.
#define XXH_INLINE_ALL
#include <sys/random.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "gcr/chunk_id.h"
#include "store/hash.h"

namespace gcr::store {

std::string Id128::hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 0xf];
  }
  return out;
}

namespace {
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

std::optional<Id128> Id128::from_hex(std::string_view text) {
  if (text.size() != 32) return std::nullopt;
  Id128 id;
  for (std::size_t i = 0; i < 16; ++i) {
    int hi = hex_value(text[2 * i]);
    int lo = hex_value(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    id.bytes[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return id;
}

Id128 Id128::random() {
  Id128 id;
  std::size_t done = 0;
  while (done < id.bytes.size()) {
    ssize_t n = ::getrandom(id.bytes.data() + done, id.bytes.size() - done, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::abort();  // getrandom cannot fail for 16 bytes once the pool is initialised
    }
    done += static_cast<std::size_t>(n);
  }
  return id;
}

ChunkId chunk_id_of(std::span<const std::byte> data) {
  XXH128_hash_t h = XXH3_128bits(data.data(), data.size());
  XXH128_canonical_t canon;
  XXH128_canonicalFromHash(&canon, h);
  ChunkId id;
  std::memcpy(id.bytes.data(), canon.digest, 16);
  return id;
}

std::uint64_t xxh3_64(std::span<const std::byte> data) {
  return XXH3_64bits(data.data(), data.size());
}

ChunkId zero_chunk_id(std::uint32_t raw_bytes) {
  static std::mutex mu;
  static std::unordered_map<std::uint32_t, ChunkId> cache;
  {
    std::lock_guard lock(mu);
    auto it = cache.find(raw_bytes);
    if (it != cache.end()) return it->second;
  }
  std::vector<std::byte> zeros(raw_bytes);
  ChunkId id = chunk_id_of(zeros);
  std::lock_guard lock(mu);
  if (cache.size() < 4096) cache.emplace(raw_bytes, id);
  return id;
}

bool all_zero(std::span<const std::byte> data) {
  const std::byte* p = data.data();
  std::size_t n = data.size();
  // Word at a time; an early non-zero word (the common case for data) returns at once.
  while (n >= 64) {
    std::uint64_t w[8];
    std::memcpy(w, p, 64);
    if ((w[0] | w[1] | w[2] | w[3] | w[4] | w[5] | w[6] | w[7]) != 0) return false;
    p += 64;
    n -= 64;
  }
  while (n > 0) {
    if (*p != std::byte{0}) return false;
    ++p;
    --n;
  }
  return true;
}

}  // namespace gcr::store
