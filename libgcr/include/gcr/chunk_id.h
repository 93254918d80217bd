// ChunkId: the name of a chunk in the image store, XXH3-128 of its raw bytes in xxHash's canonical
// (big-endian) form. Also CheckpointId and PackId, which are 128 random bits.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace gcr::store {

struct Id128 {
  std::array<std::uint8_t, 16> bytes{};

  std::string hex() const;                                      // 32 lowercase hex digits
  static std::optional<Id128> from_hex(std::string_view text);  // exactly 32 hex digits
  static Id128 random();                                        // getrandom(2)
  auto operator<=>(const Id128&) const = default;
};

using ChunkId = Id128;
using CheckpointId = Id128;
using PackId = Id128;

// XXH3-128 of data, canonical form.
ChunkId chunk_id_of(std::span<const std::byte> data);

struct Id128Hash {
  std::size_t operator()(const Id128& id) const noexcept {
    std::uint64_t v;
    __builtin_memcpy(&v, id.bytes.data(), 8);
    return static_cast<std::size_t>(v);
  }
};

}  // namespace gcr::store
