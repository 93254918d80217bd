// Where chunks begin and end (docs §7). Device regions and ordinary files: fixed chunks from the
// start. CRIU page images: content-defined cuts at page boundaries, so a page inserted or removed
// between two checkpoints changes only the chunks around it and the rest dedups.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace gcr::store {

inline constexpr std::uint32_t kPageBytes = 4096;
inline constexpr std::uint32_t kCdcMinBytes = 16 * 1024;
inline constexpr std::uint32_t kCdcMaxBytes = 1024 * 1024;
inline constexpr std::uint64_t kCdcMask = 15;  // a cut after a page whose XXH3-64 % 16 == 0

// Sizes of fixed chunks of chunk_bytes covering size bytes (the last may be shorter).
std::vector<std::uint32_t> cut_fixed(std::uint64_t size, std::uint32_t chunk_bytes);

// Content-defined cuts of data, which starts at a chunk boundary: a cut after a whole page whose
// XXH3-64 % 16 == 0 once the chunk holds >= kCdcMinBytes, and always at kCdcMaxBytes. With
// `final`, the tail after the last cut is a chunk too; without, it is left out (the caller carries
// it into the next window, and cutting restarts there with the same result).
std::vector<std::uint32_t> cut_pages(std::span<const std::byte> data, bool final);

// True for a CRIU page image ("pages-<n>.img"), by the last path component.
bool is_page_image(std::string_view relative);

}  // namespace gcr::store
