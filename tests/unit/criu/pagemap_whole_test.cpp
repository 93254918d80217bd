// make_dump_whole (Note [Incremental dumps made whole] in gcr/criu_pagemap.h): a dump whose pages
// partly live in its parent, as CRIU's --track-mem --prev-images-dir writes it, becomes one that
// stands alone, every page's bytes where a restore reads them.
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "gcr/criu_pagemap.h"

using namespace gcr;
using namespace gcr::criu;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    char name[] = "/tmp/gcr-pagemap-whole.XXXXXX";
    path = ::mkdtemp(name);
    fs::create_directories(path / "parent");
    fs::create_directories(path / "child");
  }
  ~TempDir() { fs::remove_all(path); }
};

// A page whose bytes say which dump wrote it and where it was.
std::vector<std::byte> page(char dump, std::uint64_t vaddr) {
  std::vector<std::byte> p(kPageSize);
  for (std::size_t i = 0; i < p.size(); ++i)
    p[i] = std::byte(static_cast<unsigned char>(dump + (vaddr >> 12) * 7 + i));
  return p;
}

void write_bytes(const fs::path& file, const std::vector<std::byte>& bytes) {
  std::ofstream(file, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::byte> read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  std::memcpy(out.data(), c.data(), c.size());
  return out;
}

// Writes pagemap-TASK.img and pages-ID.img into dir: each present entry's pages made by `dump`.
void write_dump(const fs::path& dir, const std::string& task, std::uint32_t pages_id,
                const std::vector<PagemapEntry>& entries, char dump) {
  Pagemap pm{pages_id, entries, 0};
  std::vector<std::byte> pages;
  for (const PagemapEntry& e : entries)
    if (e.flags & kPagesPresent)
      for (std::uint64_t i = 0; i < e.nr_pages; ++i) {
        auto p = page(dump, e.vaddr + i * kPageSize);
        pages.insert(pages.end(), p.begin(), p.end());
      }
  write_bytes(dir / ("pagemap-" + task + ".img"), encode_pagemap(pm));
  write_bytes(dir / ("pages-" + std::to_string(pages_id) + ".img"), pages);
}

// What a restore would read: every present page's bytes, by address.
std::map<std::uint64_t, std::vector<std::byte>> memory_of(const fs::path& dir,
                                                          const std::string& task) {
  auto pm = parse_pagemap(read_bytes(dir / ("pagemap-" + task + ".img")));
  REQUIRE(pm);
  auto pages = read_bytes(dir / ("pages-" + std::to_string(pm->pages_id) + ".img"));
  REQUIRE(pages.size() == pm->pages_bytes);
  std::map<std::uint64_t, std::vector<std::byte>> out;
  for (const PagemapEntry& e : pm->entries) {
    CHECK_FALSE(e.flags & kPagesInParent);
    if (!(e.flags & kPagesPresent)) continue;
    for (std::uint64_t i = 0; i < e.nr_pages; ++i)
      out[e.vaddr + i * kPageSize].assign(pages.begin() + (e.offset + i * kPageSize),
                                          pages.begin() + (e.offset + (i + 1) * kPageSize));
  }
  return out;
}

constexpr std::uint32_t P = kPagesPresent, IN_PARENT = kPagesInParent;

}  // namespace

TEST_CASE("encode_pagemap writes what parse_pagemap reads", "[pagemap]") {
  Pagemap pm{
      9, {{0x400000, 2, P, 0}, {0x600000, 3, IN_PARENT, 0}, {0x900000, 1, P | kPagesLazy, 0}}, 0};
  auto back = parse_pagemap(encode_pagemap(pm));
  REQUIRE(back);
  CHECK(back->pages_id == 9);
  REQUIRE(back->entries.size() == 3);
  CHECK(back->entries[1].flags == IN_PARENT);
  CHECK(back->entries[1].nr_pages == 3);
  CHECK(back->entries[2].offset == 2 * kPageSize);
  CHECK(back->pages_bytes == 3 * kPageSize);
}

TEST_CASE("an incremental dump made whole holds its own pages and its parent's", "[pagemap]") {
  TempDir t;
  // The parent: two runs, split where the child's in-parent run crosses them.
  write_dump(t.path / "parent", "1", 1,
             {{0x400000, 2, P, 0}, {0x402000, 2, P, 0}, {0x800000, 2, P, 0}}, 'a');
  // The child: a page written since, three from the parent across its split, two more from the
  // parent, a new run; a lazy entry with no pages stays as it is.
  write_dump(t.path / "child", "1", 5,
             {{0x400000, 1, P, 0},
              {0x401000, 3, IN_PARENT, 0},
              {0x800000, 2, IN_PARENT, 0},
              {0x900000, 1, P, 0},
              {0xa00000, 4, kPagesLazy, 0}},
             'b');
  auto whole = make_dump_whole(t.path / "child", t.path / "parent");
  REQUIRE(whole);
  CHECK(whole->from_parent == 5);
  CHECK(whole->from_dump == 2);
  auto mem = memory_of(t.path / "child", "1");
  CHECK(mem.size() == 7);
  CHECK(mem[0x400000] == page('b', 0x400000));
  for (std::uint64_t a : {0x401000, 0x402000, 0x403000, 0x800000, 0x801000})
    CHECK(mem[a] == page('a', a));
  CHECK(mem[0x900000] == page('b', 0x900000));
  auto pm = parse_pagemap(read_bytes(t.path / "child" / "pagemap-1.img"));
  REQUIRE(pm);
  CHECK(pm->pages_id == 5);
  CHECK(pm->entries.back().flags == kPagesLazy);
  CHECK_FALSE(fs::exists(t.path / "child" / "pages-5.img.whole"));
}

TEST_CASE("a dump with nothing in its parent is left as it is", "[pagemap]") {
  TempDir t;
  write_dump(t.path / "child", "7", 2, {{0x400000, 3, P, 0}}, 'c');
  auto before = read_bytes(t.path / "child" / "pagemap-7.img");
  auto pages = read_bytes(t.path / "child" / "pages-2.img");
  REQUIRE(make_dump_whole(t.path / "child", t.path / "parent"));  // no parent images needed
  CHECK(read_bytes(t.path / "child" / "pagemap-7.img") == before);
  CHECK(read_bytes(t.path / "child" / "pages-2.img") == pages);
}

TEST_CASE("a parent that lacks a page the dump says it holds is refused", "[pagemap]") {
  TempDir t;
  write_dump(t.path / "parent", "1", 1, {{0x400000, 2, P, 0}}, 'a');
  write_dump(t.path / "child", "1", 3, {{0x401000, 2, IN_PARENT, 0}}, 'b');
  auto before = read_bytes(t.path / "child" / "pagemap-1.img");
  auto s = make_dump_whole(t.path / "child", t.path / "parent");
  REQUIRE_FALSE(s);
  CHECK(s.error().code == Errc::corrupt_image);
  CHECK(s.error().message.find("0x402000") != std::string::npos);
  CHECK(read_bytes(t.path / "child" / "pagemap-1.img") == before);  // not half rewritten
}

TEST_CASE("a dump whose parent has no such task is refused", "[pagemap]") {
  TempDir t;
  write_dump(t.path / "child", "4", 3, {{0x401000, 2, IN_PARENT, 0}}, 'b');
  CHECK_FALSE(make_dump_whole(t.path / "child", t.path / "parent"));
}
