// The bytes of pack files and pack indexes (docs/image-format.md §2, §3): headers, records and
// index entries, their encoding, and the checks a reader makes. Files and I/O are pack_writer's,
// pack_reader's and catalog's.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gcr/chunk_id.h"
#include "gcr/result.h"
#include "store/compress.h"

namespace gcr::store {

inline constexpr std::uint16_t kPackMajor = 1;
inline constexpr std::uint16_t kPackMinor = 0;
inline constexpr std::uint32_t kPackHeaderBytes = 32;
inline constexpr std::uint32_t kRecordHeaderBytes = 32;
inline constexpr std::uint32_t kMaxChunkBytes = 64u << 20;
inline constexpr std::uint32_t kIndexHeaderBytes = 64;
inline constexpr std::uint32_t kIndexEntryBytes = 40;

// One record of a pack, as its index lists it.
struct IndexEntry {
  ChunkId id;
  std::uint64_t offset = 0;  // of the record header
  std::uint32_t raw_bytes = 0;
  std::uint32_t stored_bytes = 0;
  Codec codec = Codec::raw;

  // Bytes the record occupies: header, payload, padding to 8.
  std::uint64_t record_bytes() const { return record_size(stored_bytes); }
  static std::uint64_t record_size(std::uint32_t stored) {
    return kRecordHeaderBytes + ((std::uint64_t{stored} + 7) & ~std::uint64_t{7});
  }
};

struct PackIndex {
  PackId pack;
  std::uint64_t pack_bytes = 0;
  std::vector<IndexEntry> entries;  // sorted by id, strictly increasing
};

std::array<std::byte, kPackHeaderBytes> encode_pack_header(const PackId& id);
// Checks magic, version, header_bytes and that the id is `expected` (the file's name).
Status check_pack_header(std::span<const std::byte> header, const PackId& expected,
                         const std::string& origin);

std::array<std::byte, kRecordHeaderBytes> encode_record_header(const IndexEntry& e);
// Checks a record header read at e.offset against what the index says of it.
Status check_record_header(std::span<const std::byte> header, const IndexEntry& e,
                           const std::string& origin);

// Sorts the entries by id.
std::vector<std::byte> encode_pack_index(PackIndex index);
// Decodes an untrusted .idx; `origin` names it in errors ("pack index 0a1b… (path)").
Result<PackIndex> decode_pack_index(std::span<const std::byte> bytes, const std::string& origin);

}  // namespace gcr::store
