// parse_pagemap: see gcr/criu_pagemap.h.
#include "gcr/criu_pagemap.h"

#include "criu/protobuf_reader.h"

#include <cstring>
#include <optional>
#include <string>

namespace gcr::criu {
namespace {

constexpr std::uint32_t kPagemapMagic = 0x56084025;  // PAGEMAP_MAGIC

Error bad(const std::string& what) {
  return Error{Errc::corrupt_image, "pagemap image: " + what};
}

}  // namespace

Result<Pagemap> parse_pagemap(std::span<const std::byte> image) {
  ProtoBytes in(image);
  auto m1 = in.u32(), m2 = in.u32();
  if (!m1 || !m2 || *m1 != kCommonMagic || *m2 != kPagemapMagic) return bad("not one (magic)");
  Pagemap pm;
  bool head = true;
  std::uint64_t end = 0;  // of the previous entry
  while (!in.empty()) {
    std::size_t where = in.at();
    auto size = in.u32();
    if (!size) return bad("an entry's size is cut off at byte " + std::to_string(where));
    auto msg = in.take(*size);
    if (!msg) return bad("the entry at byte " + std::to_string(where) + " is cut off");
    if (head) {
      bool has_id = false;
      if (!for_each_varint(*msg,
                           [&](std::uint64_t n, std::uint64_t v) {
                             if (n == 1) pm.pages_id = static_cast<std::uint32_t>(v), has_id = true;
                           }) ||
          !has_id)
        return bad("a bad head");
      head = false;
      continue;
    }
    PagemapEntry e;
    bool has_vaddr = false, has_flags = false, has_nr = false, in_parent = false;
    std::uint64_t compat_nr = 0;
    if (!for_each_varint(*msg,
                         [&](std::uint64_t n, std::uint64_t v) {
                           switch (n) {
                             case 1:
                               e.vaddr = v, has_vaddr = true;
                               break;
                             case 2:
                               compat_nr = v;
                               break;
                             case 3:
                               in_parent = v != 0;
                               break;
                             case 4:
                               e.flags = static_cast<std::uint32_t>(v), has_flags = true;
                               break;
                             case 5:
                               e.nr_pages = v, has_nr = true;
                               break;
                             default:
                               break;
                           }
                         }) ||
        !has_vaddr)
      return bad("a bad entry at byte " + std::to_string(where));
    // As CRIU reads older images (criu/pagemap.c, init_pagemaps).
    if (in_parent)
      e.flags |= kPagesInParent;
    else if (!has_flags)
      e.flags = kPagesPresent;
    if (!has_nr) e.nr_pages = compat_nr;
    if (e.vaddr % kPageSize != 0 || e.vaddr < end || e.nr_pages == 0 ||
        e.nr_pages > (~std::uint64_t{0} - e.vaddr) / kPageSize)
      return bad("an entry out of order or out of range at byte " + std::to_string(where));
    end = e.vaddr + e.nr_pages * kPageSize;
    if (e.flags & kPagesPresent) {
      e.offset = pm.pages_bytes;
      pm.pages_bytes += e.nr_pages * kPageSize;
    }
    pm.entries.push_back(e);
  }
  if (head) return bad("no head");
  return pm;
}

}  // namespace gcr::criu
