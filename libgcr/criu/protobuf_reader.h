// A protobuf reader for the few CRIU image messages gcr reads itself (pagemap, core's creds):
// varints and the wire types CRIU's messages use; unknown fields are skipped as protobuf says.
// CRIU's images: two u32 magics, then entries each a u32 size (host order; gcr runs
// little-endian) and a message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

namespace gcr::criu {

inline constexpr std::uint32_t kCommonMagic = 0x54564319;  // IMG_COMMON_MAGIC, every image's first

class ProtoBytes {
 public:
  explicit ProtoBytes(std::span<const std::byte> b) : b_(b) {}
  bool empty() const { return at_ == b_.size(); }
  std::size_t at() const { return at_; }

  std::optional<std::uint32_t> u32() {
    if (b_.size() - at_ < 4) return std::nullopt;
    std::uint32_t v;
    std::memcpy(&v, b_.data() + at_, 4);  // CRIU writes host order; gcr runs little-endian
    at_ += 4;
    return v;
  }
  std::optional<std::uint64_t> varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_ == b_.size()) return std::nullopt;
      auto c = static_cast<std::uint8_t>(b_[at_++]);
      v |= static_cast<std::uint64_t>(c & 0x7f) << shift;
      if (!(c & 0x80)) return v;
    }
    return std::nullopt;
  }
  bool skip(std::uint64_t n) {
    if (b_.size() - at_ < n) return false;
    at_ += static_cast<std::size_t>(n);
    return true;
  }
  std::optional<ProtoBytes> take(std::uint64_t n) {
    if (b_.size() - at_ < n) return std::nullopt;
    ProtoBytes sub(b_.subspan(at_, static_cast<std::size_t>(n)));
    at_ += static_cast<std::size_t>(n);
    return sub;
  }

 private:
  std::span<const std::byte> b_;
  std::size_t at_ = 0;
};

// Calls on_varint(number, value) for each varint field and on_bytes(number, bytes) for each
// length-delimited one (a nested message, a packed repeated field, a string); skips the others.
template <typename V, typename B>
bool for_each_field(ProtoBytes msg, V&& on_varint, B&& on_bytes) {
  while (!msg.empty()) {
    auto key = msg.varint();
    if (!key) return false;
    std::uint64_t number = *key >> 3;
    switch (*key & 7) {
      case 0: {
        auto v = msg.varint();
        if (!v) return false;
        on_varint(number, *v);
        break;
      }
      case 1:
        if (!msg.skip(8)) return false;
        break;
      case 2: {
        auto n = msg.varint();
        if (!n) return false;
        auto sub = msg.take(*n);
        if (!sub) return false;
        on_bytes(number, *sub);
        break;
      }
      case 5:
        if (!msg.skip(4)) return false;
        break;
      default:
        return false;
    }
  }
  return true;
}

// Calls field(number, value) for each varint field of a message; skips the other wire types.
template <typename F>
bool for_each_varint(ProtoBytes msg, F&& field) {
  return for_each_field(msg, field, [](std::uint64_t, ProtoBytes) {});
}

}  // namespace gcr::criu
