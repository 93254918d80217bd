// Helpers for the store's tests: deterministic test data, and reading a whole object back. A
// test's store lives in a ScratchDir (tests/scratch_dir.h).
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "gcr/store.h"
#include "gcr/store_backend.h"
#include "scratch_dir.h"

namespace gcr::store::test {

// Incompressible bytes from a seed.
inline std::vector<std::byte> random_bytes(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> out(n);
  std::mt19937_64 rng(seed);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t v = rng();
    std::memcpy(out.data() + i, &v, 8);
  }
  for (; i < n; ++i) out[i] = std::byte(static_cast<std::uint8_t>(rng()));
  return out;
}

// Compressible bytes (short runs of a few symbols) from a seed.
inline std::vector<std::byte> text_bytes(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> out(n);
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i < n; ++i) out[i] = std::byte("abcd    \n"[rng() % 9]);
  return out;
}

inline std::span<const std::byte> as_bytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

inline std::shared_ptr<Store> open_store(const std::filesystem::path& root,
                                         StoreOptions extra = {}) {
  extra.root = root;
  auto s = Store::open(extra, true);
  if (!s) throw std::runtime_error(s.error().message);
  return *s;
}

// A store directory opened as a Backend (gcr/store_backend.h), made when missing.
inline std::unique_ptr<gcr::store::Backend> dir_backend(const std::filesystem::path& root) {
  gcr::store::BackendOptions o;
  o.create = true;
  auto b = gcr::store::open_dir_backend(root, o);
  if (!b) throw std::runtime_error(b.error().message);
  return std::move(b).value();
}

inline std::vector<std::byte> read_object(CheckpointReader& r, const ObjectEntry& o) {
  std::vector<std::byte> out(o.size);
  auto s = r.read(o, 0, out);
  if (!s) throw std::runtime_error(s.error().message);
  return out;
}

inline void write_file(const std::filesystem::path& path, std::span<const std::byte> data) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("cannot write " + path.string());
  if (!data.empty()) std::fwrite(data.data(), 1, data.size(), f);
  std::fclose(f);
}

inline std::vector<std::byte> slurp(const std::filesystem::path& path) {
  std::vector<std::byte> out(std::filesystem::file_size(path));
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) throw std::runtime_error("cannot read " + path.string());
  if (!out.empty() && std::fread(out.data(), 1, out.size(), f) != out.size()) {
    std::fclose(f);
    throw std::runtime_error("short read " + path.string());
  }
  std::fclose(f);
  return out;
}

// Number of files in a directory.
inline std::size_t count_files(const std::filesystem::path& dir, const std::string& ext = "") {
  std::size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (ext.empty() || e.path().extension() == ext) ++n;
  }
  return n;
}

}  // namespace gcr::store::test
