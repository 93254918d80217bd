// The store's hashes, behind one translation unit that inlines xxHash (chunk_id.cpp):
// XXH3-128 for chunk ids and file checksums (canonical form), XXH3-64 for chunk boundaries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "gcr/chunk_id.h"

namespace gcr::store {

// XXH3-64 (seed 0): the page hash of content-defined chunking (docs §7).
std::uint64_t xxh3_64(std::span<const std::byte> data);

// The id of a chunk of raw_bytes zero bytes; computed once per size and cached.
ChunkId zero_chunk_id(std::uint32_t raw_bytes);

// True when every byte is zero.
bool all_zero(std::span<const std::byte> data);

}  // namespace gcr::store
