// The checkpoints the store's integration tests write (store_writer) and check (every test):
// deterministic from a seed, with zero blocks, blocks shared between seeds (dedup), compressible
// text, a CRIU page image and a blob, so that a check can regenerate and compare every byte.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gcr/store.h"

namespace gcr::store::itest {

inline constexpr std::uint32_t kBlock = 64 * 1024;  // also the chunk size the tests use

struct Content {
  std::map<std::uint64_t, std::vector<std::byte>> regions;  // address -> bytes
  std::map<std::string, std::vector<std::byte>> files;      // relative name -> bytes
  std::map<std::string, std::vector<std::byte>> blobs;
};

inline void fill_random(std::byte* p, std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i + 8 <= n; i += 8) {
    std::uint64_t v = rng();
    std::memcpy(p + i, &v, 8);
  }
}

inline Content content_for(std::uint64_t seed, std::uint32_t size_kib) {
  Content c;
  std::size_t size = std::size_t{size_kib} * 1024;
  std::vector<std::byte> main((size + kBlock - 1) / kBlock * kBlock);
  for (std::size_t b = 0; b * kBlock < main.size(); ++b) {
    if (b % 5 == 0) continue;  // zero block
    // A third of the blocks change with the seed; the rest are shared by every seed.
    std::uint64_t s = b % 3 == 0 ? seed * 100003 + b : 7 * 100003 + b;
    fill_random(main.data() + b * kBlock, kBlock, s);
  }
  main.resize(size);
  c.regions[0x7f0000000000] = std::move(main);
  std::vector<std::byte> text(256 * 1024);
  std::mt19937_64 rng(seed);
  for (auto& b : text) b = std::byte("gcr  \n"[rng() % 6]);
  c.regions[0x7f0000400000] = std::move(text);
  std::vector<std::byte> pages(1 << 20);
  fill_random(pages.data(), pages.size(), 4242);
  fill_random(pages.data() + (seed % 200) * 4096, 4096, seed);  // one page differs per seed
  c.files["pages-1.img"] = std::move(pages);
  std::string core = "core of seed " + std::to_string(seed);
  c.files["core-1.img"] =
      std::vector<std::byte>(reinterpret_cast<const std::byte*>(core.data()),
                             reinterpret_cast<const std::byte*>(core.data()) + core.size());
  std::string state = "state " + std::to_string(seed);
  c.blobs["gcr.state"] =
      std::vector<std::byte>(reinterpret_cast<const std::byte*>(state.data()),
                             reinterpret_cast<const std::byte*>(state.data()) + state.size());
  return c;
}

}  // namespace gcr::store::itest
