// Little-endian encoding for the store's files (docs/image-format.md: all integers little-endian):
// ByteWriter appends fields, Parser reads untrusted bytes and names the file, offset and field of
// anything it rejects. Parser checks a length once (need) and then reads fixed fields unchecked.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gcr/chunk_id.h"
#include "gcr/result.h"

namespace gcr::store {

class ByteWriter {
 public:
  void u8(std::uint8_t v) { out_.push_back(std::byte{v}); }
  void u16(std::uint16_t v) { le(v, 2); }
  void u32(std::uint32_t v) { le(v, 4); }
  void u64(std::uint64_t v) { le(v, 8); }
  void id(const Id128& v) { bytes(std::as_bytes(std::span(v.bytes))); }
  void bytes(std::span<const std::byte> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  void text(std::string_view s) { bytes(std::as_bytes(std::span(s.data(), s.size()))); }
  void zeros(std::size_t n) { out_.insert(out_.end(), n, std::byte{0}); }
  void pad_to(std::size_t multiple) { zeros((multiple - out_.size() % multiple) % multiple); }
  // Overwrites a field written earlier (lengths and hashes known only at the end).
  void put_u32_at(std::size_t at, std::uint32_t v) { put_le(at, v, 4); }
  void put_u64_at(std::size_t at, std::uint64_t v) { put_le(at, v, 8); }
  void put_id_at(std::size_t at, const Id128& v) {
    std::memcpy(out_.data() + at, v.bytes.data(), 16);
  }

  std::size_t size() const { return out_.size(); }
  std::vector<std::byte>& buffer() { return out_; }
  std::vector<std::byte> take() { return std::move(out_); }

 private:
  void le(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(std::byte(static_cast<std::uint8_t>(v >> (8 * i))));
  }
  void put_le(std::size_t at, std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_[at + i] = std::byte(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  std::vector<std::byte> out_;
};

inline std::uint64_t load_le(const std::byte* p, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}
inline void store_le(std::byte* p, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = std::byte(static_cast<std::uint8_t>(v >> (8 * i)));
}

class Parser {
 public:
  // `origin` prefixes every error: "manifest 3f2a… (/store/manifests/3f2a….manifest)".
  Parser(std::span<const std::byte> data, std::string origin, std::uint64_t base_offset = 0)
      : data_(data), origin_(std::move(origin)), base_(base_offset) {}

  std::uint64_t offset() const { return base_ + pos_; }
  std::size_t position() const { return pos_; }
  std::size_t remaining() const { return data_.size() - pos_; }
  const std::string& origin() const { return origin_; }

  // Fails unless n more bytes are there: "<origin>: offset N: <field>: needs n bytes, m left".
  Status need(std::uint64_t n, std::string_view field) const {
    if (n > remaining()) {
      return fail(field, "needs " + std::to_string(n) + " bytes, " + std::to_string(remaining()) +
                             " left (truncated)");
    }
    return ok();
  }

  // Unchecked reads: call need() first.
  std::uint8_t u8() { return static_cast<std::uint8_t>(take(1)); }
  std::uint16_t u16() { return static_cast<std::uint16_t>(take(2)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(take(4)); }
  std::uint64_t u64() { return take(8); }
  Id128 id() {
    Id128 v;
    std::memcpy(v.bytes.data(), data_.data() + pos_, 16);
    pos_ += 16;
    return v;
  }
  std::span<const std::byte> bytes(std::size_t n) {
    auto s = data_.subspan(pos_, n);
    pos_ += n;
    return s;
  }
  std::string text(std::size_t n) {
    auto s = bytes(n);
    return std::string(reinterpret_cast<const char*>(s.data()), s.size());
  }
  void skip(std::size_t n) { pos_ += n; }

  // "<origin>: offset <offset>: <field>: <what>", as Errc::corrupt_image, at the current offset
  // or at an explicit one (a field already read).
  Error fail(std::string_view field, const std::string& what) const {
    return fail_at(offset(), field, what);
  }
  Error fail_at(std::uint64_t at, std::string_view field, const std::string& what) const {
    return make_error(Errc::corrupt_image, origin_ + ": offset " + std::to_string(at) + ": " +
                                               std::string(field) + ": " + what);
  }

 private:
  std::uint64_t take(int n) {
    std::uint64_t v = load_le(data_.data() + pos_, n);
    pos_ += static_cast<std::size_t>(n);
    return v;
  }

  std::span<const std::byte> data_;
  std::string origin_;
  std::uint64_t base_ = 0;
  std::size_t pos_ = 0;
};

// "a newer major version" error shared by every reader: names both versions.
inline Error newer_version_error(const std::string& origin, std::uint16_t major,
                                 std::uint16_t minor, std::uint16_t our_major,
                                 std::uint16_t our_minor) {
  return make_error(Errc::unsupported, origin + ": format version " + std::to_string(major) + "." +
                                           std::to_string(minor) + " is newer than this gcr's " +
                                           std::to_string(our_major) + "." +
                                           std::to_string(our_minor) + "; upgrade gcr to read it");
}

// Whether `bytes` is the concatenation of `parts` (an object a concurrent writer made, compared
// with the parts this one would have written).
inline bool is_concatenation(std::span<const std::byte> bytes,
                             std::span<const std::span<const std::byte>> parts) {
  for (std::span<const std::byte> p : parts) {
    if (bytes.size() < p.size() || std::memcmp(bytes.data(), p.data(), p.size()) != 0) return false;
    bytes = bytes.subspan(p.size());
  }
  return bytes.empty();
}

}  // namespace gcr::store
