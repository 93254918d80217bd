// encode_pagemap and make_dump_whole: see gcr/criu_pagemap.h, Note [Incremental dumps made whole].
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <system_error>

#include "criu/protobuf_reader.h"
#include "gcr/criu_pagemap.h"
#include "gcr/file.h"
#include "gcr/unique_fd.h"

namespace gcr::criu {
namespace {

namespace fs = std::filesystem;

constexpr std::uint32_t kPagemapMagic = 0x56084025;  // PAGEMAP_MAGIC
// A pagemap image of a task is a few entries per mapping; one this large is not CRIU's.
constexpr std::uint64_t kMaxPagemapBytes = 256ull << 20;

void put_u32(std::vector<std::byte>& out, std::uint32_t v) {
  std::byte b[4];
  std::memcpy(b, &v, 4);  // CRIU writes host order; gcr runs little-endian
  out.insert(out.end(), b, b + 4);
}

void put_varint(std::vector<std::byte>& out, std::uint64_t v) {
  do {
    auto c = static_cast<std::uint8_t>(v & 0x7f);
    v >>= 7;
    out.push_back(std::byte(c | (v ? 0x80 : 0)));
  } while (v);
}

void put_field(std::vector<std::byte>& msg, std::uint32_t number, std::uint64_t v) {
  put_varint(msg, std::uint64_t{number} << 3);  // wire type 0: varint
  put_varint(msg, v);
}

void put_message(std::vector<std::byte>& image, const std::vector<std::byte>& msg) {
  put_u32(image, static_cast<std::uint32_t>(msg.size()));
  image.insert(image.end(), msg.begin(), msg.end());
}

Error missing_in_parent(const fs::path& pagemap, std::uint64_t vaddr) {
  char at[32];
  std::snprintf(at, sizeof at, "%#llx", static_cast<unsigned long long>(vaddr));
  return Error{Errc::corrupt_image, pagemap.filename().string() + ": the page at " + at +
                                        " is said to be in the previous dump, which lacks it"};
}

// len bytes from in at in_off to out at out_off, in the kernel where it can.
Status copy_range(int in, std::uint64_t in_off, int out, std::uint64_t out_off, std::uint64_t len,
                  const fs::path& what) {
  auto io = static_cast<loff_t>(in_off), oo = static_cast<loff_t>(out_off);
  while (len > 0) {
    ssize_t n = ::copy_file_range(in, &io, out, &oo, len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
      std::vector<std::byte> buf(std::min<std::uint64_t>(len, 1u << 20));
      while (len > 0) {
        ssize_t r = ::pread(in, buf.data(), std::min<std::uint64_t>(len, buf.size()), io);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return io::file_error("reading pages for", what, r < 0 ? errno : EIO);
        GCR_TRY(io::write_all(out, std::span(buf.data(), static_cast<std::size_t>(r)),
                              static_cast<std::uint64_t>(oo), what));
        io += r, oo += r, len -= static_cast<std::uint64_t>(r);
      }
      return ok();
    }
    if (n <= 0) return io::file_error("copying pages into", what, n < 0 ? errno : EIO);
    len -= static_cast<std::uint64_t>(n);
  }
  return ok();
}

struct Images {
  Pagemap map;
  UniqueFd pages;  // pages-ID.img, open for reading
};

Result<Images> open_images(const fs::path& dir, const std::string& pagemap_name) {
  GCR_TRY_ASSIGN(auto bytes, io::read_file(dir / pagemap_name, kMaxPagemapBytes));
  GCR_TRY_ASSIGN(Pagemap map, parse_pagemap(bytes).context(pagemap_name));
  fs::path pages = dir / ("pages-" + std::to_string(map.pages_id) + ".img");
  Images out{std::move(map), {}};
  if (out.map.pages_bytes == 0) return out;  // CRIU may write no pages image for none
  GCR_TRY_ASSIGN(out.pages, io::open_file(pages, O_RDONLY));
  struct stat st {};
  if (::fstat(out.pages.get(), &st) != 0) return io::file_error("stat", pages, errno);
  if (static_cast<std::uint64_t>(st.st_size) < out.map.pages_bytes)
    return Error{Errc::corrupt_image,
                 pages.filename().string() + " holds fewer pages than " + pagemap_name + " says"};
  return out;
}

// Appends the pages of [vaddr, vaddr + nr pages) from the parent's images to `out` at *at.
Status copy_from_parent(const Images& parent, std::uint64_t vaddr, std::uint64_t nr, int out,
                        std::uint64_t* at, const fs::path& what) {
  const auto& entries = parent.map.entries;
  std::uint64_t end = vaddr + nr * kPageSize;
  // The first parent entry that ends past vaddr (entries are sorted and do not overlap).
  auto it = std::partition_point(entries.begin(), entries.end(), [&](const PagemapEntry& e) {
    return e.vaddr + e.nr_pages * kPageSize <= vaddr;
  });
  while (vaddr < end) {
    if (it == entries.end() || it->vaddr > vaddr || !(it->flags & kPagesPresent))
      return missing_in_parent(what, vaddr);
    std::uint64_t upto = std::min(end, it->vaddr + it->nr_pages * kPageSize);
    GCR_TRY(copy_range(parent.pages.get(), it->offset + (vaddr - it->vaddr), out, *at, upto - vaddr,
                       what));
    *at += upto - vaddr;
    vaddr = upto;
    ++it;
  }
  return ok();
}

Status make_pagemap_whole(const fs::path& images, const fs::path& parent_dir,
                          const std::string& name, WholeDump& count) {
  GCR_TRY_ASSIGN(Images child, open_images(images, name));
  count.from_dump += child.map.pages_bytes / kPageSize;
  if (std::none_of(child.map.entries.begin(), child.map.entries.end(),
                   [](const PagemapEntry& e) { return (e.flags & kPagesInParent) != 0; }))
    return ok();
  GCR_TRY_ASSIGN(Images parent, open_images(parent_dir, name).context("the previous dump"));
  const fs::path pages = images / ("pages-" + std::to_string(child.map.pages_id) + ".img");
  const fs::path whole = images / (pages.filename().string() + ".whole");
  GCR_TRY_ASSIGN(UniqueFd out, io::open_file(whole, O_WRONLY | O_CREAT | O_TRUNC));
  struct Unfinished {  // the new pages image goes unless it replaced the old
    const fs::path& file;
    ~Unfinished() { (void)io::remove_file(file); }
  } unfinished{whole};
  Pagemap merged{child.map.pages_id, {}, 0};
  for (const PagemapEntry& e : child.map.entries) {
    PagemapEntry m = e;
    if (e.flags & kPagesInParent) {
      GCR_TRY(copy_from_parent(parent, e.vaddr, e.nr_pages, out.get(), &merged.pages_bytes,
                               images / name));
      m.flags = (e.flags & ~kPagesInParent) | kPagesPresent;
      count.from_parent += e.nr_pages;
    } else if (e.flags & kPagesPresent) {
      GCR_TRY(copy_range(child.pages.get(), e.offset, out.get(), merged.pages_bytes,
                         e.nr_pages * kPageSize, pages));
      merged.pages_bytes += e.nr_pages * kPageSize;
    }
    if (m.flags & kPagesPresent) m.offset = merged.pages_bytes - m.nr_pages * kPageSize;
    merged.entries.push_back(m);
  }
  out.reset();
  GCR_TRY(io::rename_file(whole, pages));
  return io::replace_file(images / name, encode_pagemap(merged));
}

}  // namespace

std::vector<std::byte> encode_pagemap(const Pagemap& pm) {
  std::vector<std::byte> image;
  put_u32(image, kCommonMagic);
  put_u32(image, kPagemapMagic);
  std::vector<std::byte> msg;
  put_field(msg, 1, pm.pages_id);
  put_message(image, msg);
  for (const PagemapEntry& e : pm.entries) {
    msg.clear();
    put_field(msg, 1, e.vaddr);
    put_field(msg, 2, 0);  // compat_nr_pages: required, and 0 where nr_pages says it
    put_field(msg, 4, e.flags);
    put_field(msg, 5, e.nr_pages);
    put_message(image, msg);
  }
  return image;
}

Result<WholeDump> make_dump_whole(const fs::path& images, const fs::path& parent) {
  std::vector<std::string> pagemaps;  // listed first: the rewrite renames files in the directory
  std::error_code ec;
  for (fs::directory_iterator it(images, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.rfind("pagemap-", 0) == 0 && name.size() > 12 &&
        name.compare(name.size() - 4, 4, ".img") == 0)
      pagemaps.push_back(std::move(name));
  }
  if (ec) return io::file_error("listing", images, ec.value());
  WholeDump count;
  for (const std::string& name : pagemaps) GCR_TRY(make_pagemap_whole(images, parent, name, count));
  return count;
}

}  // namespace gcr::criu
