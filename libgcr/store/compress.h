// Chunk compression (docs §7): zstd only when it pays. A small sample of the chunk is compressed
// first; only when it shrinks below 90% is the whole chunk compressed, so incompressible data
// (most fp32/bf16 tensors) costs one probe of at most kProbeBytes. Decompression checks sizes; the
// caller checks the hash.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "gcr/result.h"

namespace gcr::store {

enum class Codec : std::uint8_t { raw = 0, zstd = 1 };

inline constexpr std::size_t kProbeSlice = 4096;
inline constexpr std::size_t kProbeSlices = 4;
inline constexpr std::size_t kProbeBytes = kProbeSlice * kProbeSlices;

struct Packed {
  Codec codec = Codec::raw;
  std::vector<std::byte> bytes;      // the zstd frame; empty for raw (store the input as is)
  std::uint64_t probe_bytes = 0;     // bytes fed to the probe
  std::uint64_t compress_bytes = 0;  // bytes fed to the full compression
};

// Compresses raw when that pays (zstd `level`); thread-safe (one zstd context per thread).
Packed pack_chunk(std::span<const std::byte> raw, int level);

// Decodes a payload of `codec` into out, which must be exactly the raw size. Errors describe the
// payload ("zstd frame: …", "decodes to N bytes, expected M") for the caller to place.
Status unpack_chunk(Codec codec, std::span<const std::byte> payload, std::span<std::byte> out);

}  // namespace gcr::store
