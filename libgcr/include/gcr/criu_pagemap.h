// CRIU's pagemap images (pagemap-ID.img): which pages of a task's memory are in its pages image,
// in which order, and which CRIU may restore lazily. Read by gcrd to serve those pages from the
// store itself (Note [Host memory from the store] in daemon/host_pages.h).
//
// Format (CRIU's images/pagemap.proto, criu/include/pagemap.h): two magics (IMG_COMMON_MAGIC,
// PAGEMAP_MAGIC), then entries each a little-endian u32 size and a protobuf message: first a
// pagemap_head { pages_id = 1 }, then pagemap_entry { vaddr = 1, compat_nr_pages = 2,
// in_parent = 3, flags = 4, nr_pages = 5 }. A present entry's pages follow those of the entries
// before it in pages-PAGES_ID.img; entries are sorted by address.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "gcr/result.h"

namespace gcr::criu {

inline constexpr std::uint64_t kPageSize = 4096;
// pagemap_entry.flags (criu/include/pagemap.h).
inline constexpr std::uint32_t kPagesInParent = 1u << 0;  // PE_PARENT
inline constexpr std::uint32_t kPagesLazy = 1u << 1;      // PE_LAZY
inline constexpr std::uint32_t kPagesPresent = 1u << 2;   // PE_PRESENT

struct PagemapEntry {
  std::uint64_t vaddr = 0;
  std::uint64_t nr_pages = 0;
  std::uint32_t flags = 0;
  std::uint64_t offset = 0;  // of its first page in the pages image (present entries)
};

struct Pagemap {
  std::uint32_t pages_id = 0;
  std::vector<PagemapEntry> entries;
  std::uint64_t pages_bytes = 0;  // what the present entries take in the pages image
};

// Parses a whole pagemap image. Fails on anything CRIU would not have written (bad magic, a
// truncated entry, entries out of order or overlapping).
[[nodiscard]] Result<Pagemap> parse_pagemap(std::span<const std::byte> image);

}  // namespace gcr::criu
