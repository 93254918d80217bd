// Manifest encoding and decoding (docs/image-format.md §4). The decoder treats its input as
// hostile: every length is checked against what is left before it is used, counts never size an
// allocation by themselves, and every error names the manifest, the offset and the field.
#include "gcr/manifest.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

#include "store/bytes.h"
#include "store/hash.h"
#include "store/names.h"

namespace gcr::store {
namespace {

constexpr char kMagic[8] = {'G', 'C', 'R', 'M', 'F', 'S', 'T', '\0'};
constexpr std::uint32_t kHeaderBytes = 64;
constexpr std::uint32_t kMaxNameBytes = 4096;
constexpr std::uint32_t kMaxChunkBytes = 64u << 20;
constexpr std::size_t kObjectBytes = 48;
constexpr std::size_t kChunkEntryBytes = 24;

enum Section : std::uint32_t { kMeta = 1, kObjects = 2, kChunks = 3, kStats = 4 };

const char* section_name(std::uint32_t type) {
  switch (type) {
    case kMeta:
      return "META";
    case kObjects:
      return "OBJECTS";
    case kChunks:
      return "CHUNKS";
    case kStats:
      return "STATS";
    default:
      return "unknown";
  }
}

void put_section(ByteWriter& w, std::uint32_t type, const ByteWriter& body) {
  w.u32(type);
  w.u32(0);
  w.u64(body.size());
  w.bytes(const_cast<ByteWriter&>(body).buffer());
}

std::string object_label(std::size_t i) {
  return "OBJECTS[" + std::to_string(i) + "]";
}

Status parse_meta(Parser& p, Manifest& m) {
  GCR_TRY(p.need(4, "META.count"));
  std::uint32_t count = p.u32();
  for (std::uint32_t i = 0; i < count; ++i) {
    std::string field = "META[" + std::to_string(i) + "]";
    GCR_TRY(p.need(2, field + ".key_len"));
    std::uint16_t key_len = p.u16();
    GCR_TRY(p.need(key_len, field + ".key"));
    std::uint64_t key_at = p.offset();
    std::string key = p.text(key_len);
    if (!valid_key(key)) return p.fail_at(key_at, field + ".key", "not [a-z0-9_.]+");
    GCR_TRY(p.need(4, field + ".value_len"));
    std::uint32_t value_len = p.u32();
    GCR_TRY(p.need(value_len, field + ".value"));
    std::string value = p.text(value_len);
    if (!m.meta.emplace(key, std::move(value)).second) {
      return p.fail_at(key_at, field + ".key", "duplicate key '" + key + "'");
    }
  }
  return ok();
}

Status parse_objects(Parser& p, Manifest& m, std::vector<std::uint64_t>& offsets) {
  GCR_TRY(p.need(4, "OBJECTS.count"));
  std::uint32_t count = p.u32();
  m.objects.reserve(std::min<std::size_t>(count, p.remaining() / kObjectBytes));
  std::set<std::string, std::less<>> file_names;
  for (std::uint32_t i = 0; i < count; ++i) {
    std::string field = object_label(i);
    GCR_TRY(p.need(kObjectBytes, field));
    std::uint64_t at = p.offset();
    ObjectEntry o;
    std::uint8_t kind = p.u8();
    std::uint8_t flags = p.u8();
    std::uint16_t reserved = p.u16();
    std::uint32_t name_bytes = p.u32();
    o.address = p.u64();
    o.size = p.u64();
    o.device = p.u32();
    o.mode = p.u32();
    o.first_chunk = p.u64();
    o.chunk_count = p.u64();
    if (kind < 1 || kind > 3) {
      return p.fail_at(at, field + ".kind", "unknown kind " + std::to_string(kind));
    }
    o.kind = static_cast<ObjectKind>(kind);
    if ((flags & ~1u) != 0) return p.fail_at(at + 1, field + ".flags", "reserved bits set");
    o.dirty = (flags & 1u) != 0;
    if (reserved != 0) return p.fail_at(at + 2, field + ".reserved", "not zero");
    if (name_bytes > kMaxNameBytes) {
      return p.fail_at(at + 4, field + ".name_bytes",
                       std::to_string(name_bytes) + " exceeds " + std::to_string(kMaxNameBytes));
    }
    if (o.kind == ObjectKind::file && (o.mode & ~07777u) != 0) {
      return p.fail_at(at + 28, field + ".mode", "bits beyond 07777 set");
    }
    std::size_t padded = (name_bytes + 7u) & ~std::size_t{7};
    GCR_TRY(p.need(padded, field + ".name"));
    std::uint64_t name_at = p.offset();
    o.name = p.text(name_bytes);
    for (std::byte b : p.bytes(padded - name_bytes)) {
      if (b != std::byte{0}) return p.fail(field + ".name padding", "not zero");
    }
    bool named_path = o.kind != ObjectKind::device_region;
    if (named_path && !valid_relative_name(o.name)) {
      return p.fail_at(name_at, field + ".name",
                       "'" + o.name.substr(0, 64) +
                           "' is not a relative path (empty, absolute, NUL, '.' or '..')");
    }
    if (!named_path && o.name.find('\0') != std::string::npos) {
      return p.fail_at(name_at, field + ".name", "contains NUL");
    }
    if (o.kind == ObjectKind::file && !file_names.insert(o.name).second) {
      return p.fail_at(name_at, field + ".name", "duplicate file '" + o.name + "'");
    }
    offsets.push_back(at);
    m.objects.push_back(std::move(o));
  }
  return ok();
}

Status parse_chunks(Parser& p, Manifest& m) {
  GCR_TRY(p.need(8, "CHUNKS.count"));
  std::uint64_t count = p.u64();
  if (count > p.remaining() / kChunkEntryBytes) {
    return p.fail("CHUNKS.count", std::to_string(count) + " entries do not fit in the " +
                                      std::to_string(p.remaining()) + " bytes left");
  }
  m.chunks.reserve(static_cast<std::size_t>(count));
  for (std::uint64_t i = 0; i < count; ++i) {
    std::string field;
    std::uint64_t at = p.offset();
    ChunkRef c;
    c.id = p.id();
    c.raw_bytes = p.u32();
    std::uint8_t flags = p.u8();
    std::uint8_t dedup = p.u8();
    std::uint16_t reserved = p.u16();
    auto label = [&] { return "CHUNKS[" + std::to_string(i) + "]"; };
    if (c.raw_bytes == 0 || c.raw_bytes > kMaxChunkBytes) {
      return p.fail_at(
          at + 16, label() + ".raw_bytes",
          std::to_string(c.raw_bytes) + " outside 1.." + std::to_string(kMaxChunkBytes));
    }
    if ((flags & ~1u) != 0) return p.fail_at(at + 20, label() + ".flags", "reserved bits set");
    c.zero = (flags & 1u) != 0;
    if (dedup > 4) {
      return p.fail_at(at + 21, label() + ".dedup", "unknown class " + std::to_string(dedup));
    }
    c.dedup = static_cast<DedupClass>(dedup);
    if (c.zero != (c.dedup == DedupClass::zero)) {
      return p.fail_at(at + 20, label() + ".flags", "zero flag and dedup class 'zero' disagree");
    }
    if (reserved != 0) return p.fail_at(at + 22, label() + ".reserved", "not zero");
    m.chunks.push_back(c);
  }
  return ok();
}

Status parse_stats(Parser& p, Manifest& m) {
  GCR_TRY(p.need(4, "STATS.count"));
  std::uint32_t count = p.u32();
  for (std::uint32_t i = 0; i < count; ++i) {
    std::string field = "STATS[" + std::to_string(i) + "]";
    GCR_TRY(p.need(2, field + ".key_len"));
    std::uint16_t key_len = p.u16();
    GCR_TRY(p.need(std::uint64_t{key_len} + 8, field));
    std::uint64_t key_at = p.offset();
    std::string key = p.text(key_len);
    if (!valid_key(key)) return p.fail_at(key_at, field + ".key", "not [a-z0-9_.]+");
    std::uint64_t value = p.u64();
    if (!m.stats.emplace(key, value).second) {
      return p.fail_at(key_at, field + ".key", "duplicate key '" + key + "'");
    }
  }
  return ok();
}

// Objects name ranges of CHUNKS whose raw sizes add up to the object's size.
Status check_objects(const Parser& p, const Manifest& m, const std::vector<std::uint64_t>& at) {
  std::vector<std::uint64_t> prefix(m.chunks.size() + 1, 0);
  for (std::size_t i = 0; i < m.chunks.size(); ++i)
    prefix[i + 1] = prefix[i] + m.chunks[i].raw_bytes;
  for (std::size_t i = 0; i < m.objects.size(); ++i) {
    const ObjectEntry& o = m.objects[i];
    if (o.first_chunk > m.chunks.size() || o.chunk_count > m.chunks.size() - o.first_chunk) {
      return p.fail_at(at[i] + 32, object_label(i) + ".first_chunk",
                       "chunks [" + std::to_string(o.first_chunk) + ", +" +
                           std::to_string(o.chunk_count) + ") outside CHUNKS (" +
                           std::to_string(m.chunks.size()) + " entries)");
    }
    std::uint64_t sum = prefix[o.first_chunk + o.chunk_count] - prefix[o.first_chunk];
    if (sum != o.size) {
      return p.fail_at(
          at[i] + 16, object_label(i) + ".size",
          std::to_string(o.size) + " bytes, but its chunks hold " + std::to_string(sum));
    }
  }
  return ok();
}

}  // namespace

std::vector<std::size_t> first_touch_order(const Manifest& m,
                                           std::span<const ObjectEntry* const> regions) {
  std::string order = m.meta_or("touch_order", "");
  std::map<std::uint64_t, std::size_t> rank;  // address -> place in touch_order
  std::size_t pos = 0;
  for (std::size_t start = 0; start < order.size();) {
    std::size_t comma = order.find(',', start);
    if (comma == std::string::npos) comma = order.size();
    std::uint64_t a = std::strtoull(order.substr(start, comma - start).c_str(), nullptr, 16);
    rank.emplace(a, pos++);
    start = comma + 1;
  }
  auto rank_of = [&](std::size_t i) {
    auto it = rank.find(regions[i]->address);
    return it == rank.end() ? SIZE_MAX : it->second;
  };
  std::vector<std::size_t> idx(regions.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(),
                   [&](std::size_t x, std::size_t y) { return rank_of(x) < rank_of(y); });
  return idx;
}

std::vector<std::byte> encode_manifest(const Manifest& m) {
  ByteWriter meta;
  meta.u32(static_cast<std::uint32_t>(m.meta.size()));
  for (const auto& [key, value] : m.meta) {
    meta.u16(static_cast<std::uint16_t>(key.size()));
    meta.text(key);
    meta.u32(static_cast<std::uint32_t>(value.size()));
    meta.text(value);
  }
  ByteWriter objects;
  objects.u32(static_cast<std::uint32_t>(m.objects.size()));
  for (const ObjectEntry& o : m.objects) {
    objects.u8(static_cast<std::uint8_t>(o.kind));
    objects.u8(o.dirty ? 1 : 0);
    objects.u16(0);
    objects.u32(static_cast<std::uint32_t>(o.name.size()));
    objects.u64(o.address);
    objects.u64(o.size);
    objects.u32(o.device);
    objects.u32(o.mode);
    objects.u64(o.first_chunk);
    objects.u64(o.chunk_count);
    objects.text(o.name);
    objects.zeros((8 - o.name.size() % 8) % 8);
  }
  ByteWriter chunks;
  chunks.u64(m.chunks.size());
  for (const ChunkRef& c : m.chunks) {
    chunks.id(c.id);
    chunks.u32(c.raw_bytes);
    chunks.u8(c.zero ? 1 : 0);
    chunks.u8(static_cast<std::uint8_t>(c.dedup));
    chunks.u16(0);
  }
  ByteWriter stats;
  stats.u32(static_cast<std::uint32_t>(m.stats.size()));
  for (const auto& [key, value] : m.stats) {
    stats.u16(static_cast<std::uint16_t>(key.size()));
    stats.text(key);
    stats.u64(value);
  }

  ByteWriter w;
  w.bytes(std::as_bytes(std::span(kMagic)));
  w.u16(kManifestMajor);
  w.u16(kManifestMinor);
  w.u32(kHeaderBytes);
  w.u64(0);  // body_bytes, below
  w.id(m.id);
  w.zeros(16);  // body hash, below
  w.u64(0);     // reserved
  put_section(w, kMeta, meta);
  put_section(w, kObjects, objects);
  put_section(w, kChunks, chunks);
  put_section(w, kStats, stats);
  std::uint64_t body_bytes = w.size() - kHeaderBytes;
  w.put_u64_at(16, body_bytes);
  w.put_id_at(40, chunk_id_of(std::span(w.buffer()).subspan(kHeaderBytes)));
  return w.take();
}

Result<Manifest> decode_manifest(std::span<const std::byte> bytes, const std::string& origin) {
  Parser p(bytes, "manifest " + origin);
  GCR_TRY(p.need(kHeaderBytes, "header"));
  if (std::memcmp(p.bytes(8).data(), kMagic, 8) != 0) {
    return p.fail_at(0, "magic", "not a gcr manifest (expected \"GCRMFST\\0\")");
  }
  std::uint16_t major = p.u16();
  std::uint16_t minor = p.u16();
  if (major > kManifestMajor) {
    return newer_version_error(p.origin(), major, minor, kManifestMajor, kManifestMinor);
  }
  if (major != kManifestMajor) {
    return p.fail_at(8, "major", "version " + std::to_string(major) + " is not supported");
  }
  std::uint32_t header_bytes = p.u32();
  if (header_bytes != kHeaderBytes) {
    return p.fail_at(12, "header_bytes", std::to_string(header_bytes) + ", expected 64");
  }
  std::uint64_t body_bytes = p.u64();
  if (body_bytes != bytes.size() - kHeaderBytes) {
    return p.fail_at(16, "body_bytes",
                     std::to_string(body_bytes) + ", but the file holds " +
                         std::to_string(bytes.size() - kHeaderBytes) + " bytes after the header");
  }
  Manifest m;
  m.id = p.id();
  ChunkId body_hash = p.id();
  if (p.u64() != 0) return p.fail_at(56, "reserved", "not zero");
  auto body = bytes.subspan(kHeaderBytes);
  if (chunk_id_of(body) != body_hash) {
    return p.fail_at(40, "body hash", "XXH3-128 of the body does not match (damaged file)");
  }

  Parser b(body, p.origin(), kHeaderBytes);
  std::uint32_t next = kMeta;  // the next required section
  std::vector<std::uint64_t> object_offsets;
  while (b.remaining() > 0) {
    GCR_TRY(b.need(16, "section header"));
    std::uint64_t at = b.offset();
    std::uint32_t type = b.u32();
    std::uint32_t reserved = b.u32();
    std::uint64_t length = b.u64();
    if (reserved != 0) return b.fail_at(at + 4, "section reserved", "not zero");
    std::string field = std::string("section ") + section_name(type) + " (type " +
                        std::to_string(type) + ") length";
    GCR_TRY(b.need(length, field));
    Parser s(b.bytes(static_cast<std::size_t>(length)), p.origin(), at + 16);
    if (type < kMeta || type > kStats) continue;  // unknown: a newer minor version's, skipped
    if (type != next) {
      return b.fail_at(at, "section type",
                       std::string(section_name(type)) + " where " + section_name(next) +
                           " must come (sections 1-4 appear once, in order)");
    }
    switch (type) {
      case kMeta:
        GCR_TRY(parse_meta(s, m));
        break;
      case kObjects:
        GCR_TRY(parse_objects(s, m, object_offsets));
        break;
      case kChunks:
        GCR_TRY(parse_chunks(s, m));
        break;
      case kStats:
        GCR_TRY(parse_stats(s, m));
        break;
    }
    if (s.remaining() != 0) {
      return s.fail(std::string(section_name(type)),
                    std::to_string(s.remaining()) + " bytes left over at the section's end");
    }
    ++next;
  }
  if (next <= kStats) {
    return b.fail(std::string("section ") + section_name(next), "missing");
  }
  GCR_TRY(check_objects(p, m, object_offsets));
  return m;
}

}  // namespace gcr::store
