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
#include <filesystem>
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

// A pagemap image as CRIU writes it: the head, then each entry with vaddr, compat_nr_pages (0),
// flags and nr_pages (offsets are the pages image's business: entries' order says them).
std::vector<std::byte> encode_pagemap(const Pagemap& pm);

// Note [Incremental dumps made whole]
// Where CRIU lacks cow-track (a CRIU without gcr's patches) and the kernel keeps soft-dirty bits,
// gcrd's live checkpoints use CRIU's own incremental dumps: each with --track-mem, and from the
// second on with --prev-images-dir naming the previous dump. Such a dump writes only the pages
// written since its parent; the others are entries flagged in_parent (PE_PARENT) that CRIU's
// restore looks up through the images directory's `parent` link, down the chain. gcr's store keeps
// dumps that stand alone (a chain would tie each checkpoint to every one before it, and a restore
// to all of their files), so make_dump_whole rewrites each pagemap-*.img of `images` that has
// such entries, with its pages-ID.img, taking those pages from the same-named images of `parent`
// (itself whole): every entry present, in the order CRIU would have written them. A parent that
// lacks a page the dump says it holds is a corrupt_image error (the dump cannot be stored whole).
// Says how many pages came from where.
struct WholeDump {
  std::uint64_t from_parent = 0;  // copied from the parent's images
  std::uint64_t from_dump = 0;    // the dump's own: written since the parent
};
[[nodiscard]] Result<WholeDump> make_dump_whole(const std::filesystem::path& images,
                                                const std::filesystem::path& parent);

}  // namespace gcr::criu
