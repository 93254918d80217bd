// Manifests: what one checkpoint is made of (docs/image-format.md §4). Encoding and decoding only;
// where manifests live and how they are committed is the store's (gcr/store.h).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "gcr/chunk_id.h"
#include "gcr/result.h"

namespace gcr::store {

inline constexpr std::uint16_t kManifestMajor = 1;
inline constexpr std::uint16_t kManifestMinor = 0;

enum class ObjectKind : std::uint8_t { device_region = 1, file = 2, blob = 3 };

// Where a chunk's bytes came from when the checkpoint was written (docs §4, CHUNKS).
enum class DedupClass : std::uint8_t { fresh = 0, zero = 1, self = 2, lineage = 3, other = 4 };

struct ChunkRef {
  ChunkId id;
  std::uint32_t raw_bytes = 0;
  bool zero = false;
  DedupClass dedup = DedupClass::fresh;
};

struct ObjectEntry {
  ObjectKind kind = ObjectKind::blob;
  bool dirty = false;         // device regions: written since the previous checkpoint
  std::string name;           // files: path relative to the CRIU image dir
  std::uint64_t address = 0;  // device regions
  std::uint64_t size = 0;
  std::uint32_t device = 0;  // device regions
  std::uint32_t mode = 0;    // files
  std::uint64_t first_chunk = 0;
  std::uint64_t chunk_count = 0;
};

struct Manifest {
  CheckpointId id;
  std::map<std::string, std::string> meta;  // docs §4 META keys
  std::vector<ObjectEntry> objects;
  std::vector<ChunkRef> chunks;
  std::map<std::string, std::uint64_t> stats;

  std::string meta_or(const std::string& key, const std::string& fallback = {}) const {
    auto it = meta.find(key);
    return it == meta.end() ? fallback : it->second;
  }
};

// The order in which to bring device regions back: indexes into `regions`, those the process
// touched first after its cut first (META touch_order: comma-separated hex addresses, recorded
// by the interposer), the rest after them as given. Restores load, and stream from a bucket, in
// this order.
std::vector<std::size_t> first_touch_order(const Manifest& m,
                                           std::span<const ObjectEntry* const> regions);

std::vector<std::byte> encode_manifest(const Manifest& m);

// Decodes an untrusted manifest. `origin` names it in errors ("manifest 3f2a…: ...").
Result<Manifest> decode_manifest(std::span<const std::byte> bytes, const std::string& origin);

}  // namespace gcr::store
