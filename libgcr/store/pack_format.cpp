// Pack and pack index bytes: see pack_format.h. Every decoder check names origin, offset, field.
#include "store/pack_format.h"

#include <algorithm>
#include <cstring>

#include "store/bytes.h"

namespace gcr::store {
namespace {

constexpr char kPackMagic[8] = {'G', 'C', 'R', 'P', 'A', 'C', 'K', '\0'};
constexpr char kIndexMagic[8] = {'G', 'C', 'R', 'P', 'I', 'D', 'X', '\0'};
constexpr char kRecordMagic[4] = {'C', 'H', 'N', 'K'};

std::string entry_label(std::size_t i) {
  return "entries[" + std::to_string(i) + "]";
}

}  // namespace

std::array<std::byte, kPackHeaderBytes> encode_pack_header(const PackId& id) {
  std::array<std::byte, kPackHeaderBytes> h{};
  std::memcpy(h.data(), kPackMagic, 8);
  store_le(h.data() + 8, kPackMajor, 2);
  store_le(h.data() + 10, kPackMinor, 2);
  store_le(h.data() + 12, kPackHeaderBytes, 4);
  std::memcpy(h.data() + 16, id.bytes.data(), 16);
  return h;
}

Status check_pack_header(std::span<const std::byte> header, const PackId& expected,
                         const std::string& origin) {
  Parser p(header, origin);
  GCR_TRY(p.need(kPackHeaderBytes, "header"));
  if (std::memcmp(p.bytes(8).data(), kPackMagic, 8) != 0) {
    return p.fail_at(0, "magic", "not a gcr pack (expected \"GCRPACK\\0\")");
  }
  std::uint16_t major = p.u16();
  std::uint16_t minor = p.u16();
  if (major > kPackMajor) return newer_version_error(origin, major, minor, kPackMajor, kPackMinor);
  if (major != kPackMajor) return p.fail_at(8, "major", "version 0 is not supported");
  std::uint32_t header_bytes = p.u32();
  if (header_bytes != kPackHeaderBytes) {
    return p.fail_at(12, "header_bytes", std::to_string(header_bytes) + ", expected 32");
  }
  PackId id = p.id();
  if (id != expected) {
    return p.fail_at(16, "pack id", id.hex() + " does not match the file name " + expected.hex());
  }
  return ok();
}

std::array<std::byte, kRecordHeaderBytes> encode_record_header(const IndexEntry& e) {
  std::array<std::byte, kRecordHeaderBytes> h{};
  std::memcpy(h.data(), kRecordMagic, 4);
  h[4] = std::byte{static_cast<std::uint8_t>(e.codec)};
  store_le(h.data() + 8, e.raw_bytes, 4);
  store_le(h.data() + 12, e.stored_bytes, 4);
  std::memcpy(h.data() + 16, e.id.bytes.data(), 16);
  return h;
}

Status check_record_header(std::span<const std::byte> header, const IndexEntry& e,
                           const std::string& origin) {
  Parser p(header, origin, e.offset);
  GCR_TRY(p.need(kRecordHeaderBytes, "record header"));
  if (std::memcmp(p.bytes(4).data(), kRecordMagic, 4) != 0) {
    return p.fail_at(e.offset, "record magic", "not \"CHNK\" (damaged pack or index)");
  }
  auto codec = p.u8();
  if (codec != static_cast<std::uint8_t>(e.codec)) {
    return p.fail_at(
        e.offset + 4, "record codec",
        std::to_string(codec) + ", the index says " + std::to_string(static_cast<int>(e.codec)));
  }
  auto reserved = p.bytes(3);
  if (reserved[0] != std::byte{0} || reserved[1] != std::byte{0} || reserved[2] != std::byte{0}) {
    return p.fail_at(e.offset + 5, "record reserved", "not zero");
  }
  std::uint32_t raw = p.u32();
  std::uint32_t stored = p.u32();
  if (raw != e.raw_bytes || stored != e.stored_bytes) {
    return p.fail_at(e.offset + 8, "record sizes",
                     "raw " + std::to_string(raw) + " stored " + std::to_string(stored) +
                         ", the index says raw " + std::to_string(e.raw_bytes) + " stored " +
                         std::to_string(e.stored_bytes));
  }
  ChunkId id = p.id();
  if (id != e.id) {
    return p.fail_at(e.offset + 16, "record chunk id", id.hex() + ", the index says " + e.id.hex());
  }
  return ok();
}

std::vector<std::byte> encode_pack_index(PackIndex index) {
  std::sort(index.entries.begin(), index.entries.end(),
            [](const IndexEntry& a, const IndexEntry& b) { return a.id < b.id; });
  ByteWriter entries;
  for (const IndexEntry& e : index.entries) {
    entries.id(e.id);
    entries.u64(e.offset);
    entries.u32(e.raw_bytes);
    entries.u32(e.stored_bytes);
    entries.u8(static_cast<std::uint8_t>(e.codec));
    entries.zeros(7);
  }
  ByteWriter w;
  w.bytes(std::as_bytes(std::span(kIndexMagic)));
  w.u16(kPackMajor);
  w.u16(kPackMinor);
  w.u32(static_cast<std::uint32_t>(index.entries.size()));
  w.u64(index.pack_bytes);
  w.id(index.pack);
  w.id(chunk_id_of(entries.buffer()));
  w.u64(0);
  w.bytes(entries.buffer());
  return w.take();
}

Result<PackIndex> decode_pack_index(std::span<const std::byte> bytes, const std::string& origin) {
  Parser p(bytes, origin);
  GCR_TRY(p.need(kIndexHeaderBytes, "header"));
  if (std::memcmp(p.bytes(8).data(), kIndexMagic, 8) != 0) {
    return p.fail_at(0, "magic", "not a gcr pack index (expected \"GCRPIDX\\0\")");
  }
  std::uint16_t major = p.u16();
  std::uint16_t minor = p.u16();
  if (major > kPackMajor) return newer_version_error(origin, major, minor, kPackMajor, kPackMinor);
  if (major != kPackMajor) return p.fail_at(8, "major", "version 0 is not supported");
  std::uint32_t count = p.u32();
  PackIndex index;
  index.pack_bytes = p.u64();
  index.pack = p.id();
  ChunkId hash = p.id();
  if (p.u64() != 0) return p.fail_at(56, "reserved", "not zero");
  if (std::uint64_t{count} * kIndexEntryBytes != p.remaining()) {
    return p.fail_at(12, "entry_count",
                     std::to_string(count) + " entries of 40 bytes, but " +
                         std::to_string(p.remaining()) + " bytes follow the header");
  }
  if (index.pack_bytes < kPackHeaderBytes) {
    return p.fail_at(16, "pack_bytes", std::to_string(index.pack_bytes) + " is below the header");
  }
  if (chunk_id_of(bytes.subspan(kIndexHeaderBytes)) != hash) {
    return p.fail_at(40, "entries hash", "XXH3-128 of the entries does not match (damaged file)");
  }
  index.entries.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    std::uint64_t at = p.offset();
    IndexEntry e;
    e.id = p.id();
    e.offset = p.u64();
    e.raw_bytes = p.u32();
    e.stored_bytes = p.u32();
    std::uint8_t codec = p.u8();
    auto reserved = p.bytes(7);
    if (i > 0 && !(index.entries.back().id < e.id)) {
      return p.fail_at(at, entry_label(i) + ".id", "not above the previous id (unsorted)");
    }
    if (e.offset % 8 != 0 || e.offset < kPackHeaderBytes) {
      return p.fail_at(at + 16, entry_label(i) + ".offset",
                       std::to_string(e.offset) + " is not a multiple of 8 at or past 32");
    }
    if (e.raw_bytes == 0 || e.raw_bytes > kMaxChunkBytes) {
      return p.fail_at(
          at + 24, entry_label(i) + ".raw_bytes",
          std::to_string(e.raw_bytes) + " outside 1.." + std::to_string(kMaxChunkBytes));
    }
    if (codec > 1) {
      return p.fail_at(at + 32, entry_label(i) + ".codec",
                       "unknown codec " + std::to_string(codec));
    }
    e.codec = static_cast<Codec>(codec);
    bool sizes_ok = e.codec == Codec::raw ? e.stored_bytes == e.raw_bytes
                                          : e.stored_bytes >= 1 && e.stored_bytes <= e.raw_bytes;
    if (!sizes_ok) {
      return p.fail_at(at + 28, entry_label(i) + ".stored_bytes",
                       std::to_string(e.stored_bytes) + " does not fit codec " +
                           std::to_string(codec) + " and raw_bytes " + std::to_string(e.raw_bytes));
    }
    for (std::byte b : reserved) {
      if (b != std::byte{0}) return p.fail_at(at + 33, entry_label(i) + ".reserved", "not zero");
    }
    // offset <= pack_bytes first, so that the subtraction cannot wrap.
    if (e.offset > index.pack_bytes ||
        e.record_bytes() - ((8 - e.stored_bytes % 8) % 8) > index.pack_bytes - e.offset) {
      return p.fail_at(at + 16, entry_label(i) + ".offset",
                       "record at " + std::to_string(e.offset) + " of " +
                           std::to_string(e.record_bytes()) + " bytes ends past pack_bytes " +
                           std::to_string(index.pack_bytes));
    }
    index.entries.push_back(e);
  }
  return index;
}

}  // namespace gcr::store
