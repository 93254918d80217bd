// The fatbin container (what `nvcc --fatbin` writes and a wrapper's `data` points at): walks its
// entry headers, picks the one entry that suits the device, decompresses it if needed and hands
// it to the cubin or PTX parser. Owns the fatbin and entry header layouts and the choice of
// entry; does not own ELF, PTX or the decompressors themselves.
//
// Layout (little-endian; see docs/simgpu-module-images.md):
//   fatbin header, 16 bytes: u32 magic 0xBA55ED50 | u16 version 1 | u16 header_size | u64 fat_size
//   then entries back to back until header_size + fat_size; each entry is a header of
//   `entry header_size` bytes followed by `payload_size` bytes (the payload, padded).
//   entry header: 0x00 u16 kind (1 PTX, 2 ELF, 8 LTO-IR) | 0x02 u16 version | 0x04 u32 header_size
//     | 0x08 u64 payload_size | 0x10 u32 compressed_size | 0x1c u32 arch (90 = sm_90/compute_90)
//     | 0x28 u64 flags (0x2000 LZ4, 0x8000 zstd) | 0x38 u64 decompressed_size
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "module_image_internal.h"

namespace gcr::simgpu::detail {
namespace {

constexpr uint64_t kFatbinHeaderBytes = 16;
constexpr uint16_t kFatbinVersion = 1;

constexpr uint64_t kEntryMinHeaderBytes = 0x40;
constexpr uint16_t kKindPtx = 1;
constexpr uint16_t kKindElf = 2;
constexpr uint16_t kKindLtoIr = 8;
constexpr uint64_t kFlagLz4 = 0x2000;
constexpr uint64_t kFlagZstd = 0x8000;

struct Entry {
  size_t index = 0;
  uint64_t offset = 0;  // of the entry header, from the fatbin's start
  uint16_t kind = 0;
  uint32_t arch = 0;
  uint64_t flags = 0;
  uint32_t compressed_size = 0;
  uint64_t decompressed_size = 0;
  ByteView payload;  // payload_size bytes, padding included
};

std::string describe(const Entry& e) {
  std::string what = e.kind == kKindElf   ? "sm_" + std::to_string(e.arch) + " cubin"
                     : e.kind == kKindPtx ? "compute_" + std::to_string(e.arch) + " PTX"
                                          : "kind " + std::to_string(e.kind);
  return "fatbin entry " + std::to_string(e.index) + " (" + what + ") at offset " + hex(e.offset);
}

Result<std::vector<Entry>> read_entries(ByteView image) {
  if (!image.contains(0, kFatbinHeaderBytes)) {
    return corrupt("fatbin: header needs 0x10 bytes, limit is " + hex(image.size()));
  }
  auto version = image.load<uint16_t>(4);
  if (version != kFatbinVersion) {
    return unsupported("fatbin: version " + std::to_string(version) +
                       " at offset 0x4 (expected 1)");
  }
  uint64_t header_size = image.load<uint16_t>(6);
  uint64_t fat_size = image.load<uint64_t>(8);
  if (header_size < kFatbinHeaderBytes) {
    return corrupt("fatbin: header_size " + hex(header_size) + " at offset 0x6 is below 0x10");
  }
  if (!image.contains(header_size, fat_size)) {
    return corrupt("fatbin: header_size " + hex(header_size) + " + fat_size " + hex(fat_size) +
                   " (offset 0x8) beyond image size " + hex(image.size()));
  }
  ByteView fatbin = image.sub(0, header_size + fat_size);

  std::vector<Entry> entries;
  uint64_t offset = header_size;
  while (offset < fatbin.size()) {
    Entry e;
    e.index = entries.size();
    e.offset = offset;
    std::string where = "fatbin entry " + std::to_string(e.index) + " at offset " + hex(offset);
    if (!fatbin.contains(offset, kEntryMinHeaderBytes)) {
      return corrupt(where + ": header needs 0x40 bytes, fatbin has " +
                     hex(fatbin.size() - offset) + " left");
    }
    e.kind = fatbin.load<uint16_t>(offset + 0x00);
    uint64_t entry_header_size = fatbin.load<uint32_t>(offset + 0x04);
    uint64_t payload_size = fatbin.load<uint64_t>(offset + 0x08);
    e.compressed_size = fatbin.load<uint32_t>(offset + 0x10);
    e.arch = fatbin.load<uint32_t>(offset + 0x1c);
    e.flags = fatbin.load<uint64_t>(offset + 0x28);
    e.decompressed_size = fatbin.load<uint64_t>(offset + 0x38);
    if (entry_header_size < kEntryMinHeaderBytes || !fatbin.contains(offset, entry_header_size)) {
      return corrupt(where + ": header_size " + hex(entry_header_size) +
                     " (offset +0x4) is below 0x40 or beyond fatbin size " + hex(fatbin.size()));
    }
    uint64_t payload_offset = offset + entry_header_size;
    if (!fatbin.contains(payload_offset, payload_size)) {
      return corrupt(where + ": payload_size " + hex(payload_size) + " (offset +0x8) at offset " +
                     hex(payload_offset) + " beyond fatbin size " + hex(fatbin.size()));
    }
    e.payload = fatbin.sub(payload_offset, payload_size);
    entries.push_back(e);
    offset = payload_offset + payload_size;
  }
  if (entries.empty()) return corrupt("fatbin: no entries (fat_size 0)");
  return entries;
}

// The exact sm's cubin, else the highest sm <= device_sm, else the highest PTX <= device_sm.
const Entry* choose(const std::vector<Entry>& entries, int device_sm) {
  const Entry* best = nullptr;
  for (const auto& e : entries) {
    if (e.kind != kKindElf || static_cast<int64_t>(e.arch) > device_sm) continue;
    if (!best || e.arch > best->arch) best = &e;
  }
  if (best) return best;
  for (const auto& e : entries) {
    if (e.kind != kKindPtx || static_cast<int64_t>(e.arch) > device_sm) continue;
    if (!best || e.arch > best->arch) best = &e;
  }
  return best;
}

std::string list_contents(const std::vector<Entry>& entries) {
  std::string list;
  for (const auto& e : entries) {
    if (!list.empty()) list += ", ";
    list += e.kind == kKindElf     ? "sm_" + std::to_string(e.arch) + " cubin"
            : e.kind == kKindPtx   ? "compute_" + std::to_string(e.arch) + " PTX"
            : e.kind == kKindLtoIr ? "compute_" + std::to_string(e.arch) + " LTO-IR"
                                   : "kind " + std::to_string(e.kind);
  }
  return list;
}

// The entry's payload as stored, or decompressed into `storage`.
Result<ByteView> payload_bytes(const Entry& e, OwnedBytes& storage) {
  uint64_t method = e.flags & (kFlagLz4 | kFlagZstd);
  if (method == 0) return e.payload;
  if (method == (kFlagLz4 | kFlagZstd)) {
    return corrupt("flags " + hex(e.flags) + " (offset +0x28) claim both LZ4 and zstd");
  }
  if (e.compressed_size == 0 || e.compressed_size > e.payload.size()) {
    return corrupt("compressed_size " + hex(e.compressed_size) +
                   " (offset +0x10) is 0 or beyond payload_size " + hex(e.payload.size()));
  }
  if (e.decompressed_size == 0 || e.decompressed_size > kMaxDecompressedBytes) {
    return corrupt("decompressed_size " + hex(e.decompressed_size) +
                   " (offset +0x38) is 0 or above the " + hex(kMaxDecompressedBytes) + " bound");
  }
  ByteView compressed = e.payload.sub(0, e.compressed_size);
  auto out = method == kFlagZstd ? decompress_zstd(compressed, e.decompressed_size)
                                 : decompress_lz4(compressed, e.decompressed_size);
  if (!out) return std::move(out).error();
  storage = std::move(*out);
  return storage.view();
}

Result<ModuleImage> parse_entry(const Entry& e) {
  OwnedBytes storage;
  auto bytes = payload_bytes(e, storage);
  if (!bytes) return std::move(bytes).error();
  if (e.kind == kKindElf) {
    auto module = parse_cubin(*bytes);
    if (module) module->sm = static_cast<int>(e.arch);
    return module;
  }
  // PTX text, NUL-terminated inside its (padded) payload.
  const char* text = reinterpret_cast<const char*>(bytes->data());
  const void* nul = std::memchr(text, 0, bytes->size());
  size_t length = nul ? static_cast<size_t>(static_cast<const char*>(nul) - text) : bytes->size();
  return parse_ptx(std::string_view(text, length));
}

}  // namespace

Result<ModuleImage> parse_fatbin(ByteView image, int device_sm) {
  auto entries = read_entries(image);
  if (!entries) return std::move(entries).error();
  const Entry* chosen = choose(*entries, device_sm);
  if (!chosen) {
    return unsupported("fatbin: no cubin for sm_" + std::to_string(device_sm) +
                       " or below and no PTX for compute_" + std::to_string(device_sm) +
                       " or below; it holds: " + list_contents(*entries));
  }
  return parse_entry(*chosen).context(describe(*chosen));
}

}  // namespace gcr::simgpu::detail
