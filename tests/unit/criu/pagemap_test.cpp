// parse_pagemap reads what CRIU writes (images/pagemap.proto), as CRIU reads it, and refuses what
// CRIU would not write.
#include <catch2/catch.hpp>

#include <cstring>
#include <optional>
#include <vector>

#include "gcr/criu_pagemap.h"

using namespace gcr;
using namespace gcr::criu;

namespace {

void put_u32(std::vector<std::byte>& out, std::uint32_t v) {
  std::byte b[4];
  std::memcpy(b, &v, 4);
  out.insert(out.end(), b, b + 4);
}
void put_varint(std::vector<std::byte>& out, std::uint64_t v) {
  do {
    auto c = static_cast<std::uint8_t>(v & 0x7f);
    v >>= 7;
    out.push_back(std::byte(c | (v ? 0x80 : 0)));
  } while (v);
}
void field(std::vector<std::byte>& msg, int number, std::uint64_t v) {
  put_varint(msg, static_cast<std::uint64_t>(number) << 3);
  put_varint(msg, v);
}
void entry(std::vector<std::byte>& image, const std::vector<std::byte>& msg) {
  put_u32(image, static_cast<std::uint32_t>(msg.size()));
  image.insert(image.end(), msg.begin(), msg.end());
}
std::vector<std::byte> header(std::uint32_t pages_id) {
  std::vector<std::byte> image;
  put_u32(image, 0x54564319);
  put_u32(image, 0x56084025);
  std::vector<std::byte> head;
  field(head, 1, pages_id);
  entry(image, head);
  return image;
}
std::vector<std::byte> pe(std::uint64_t vaddr, std::uint64_t nr, std::optional<std::uint32_t> flags,
                          bool compat = false, bool in_parent = false) {
  std::vector<std::byte> m;
  field(m, 1, vaddr);
  field(m, 2, compat ? nr : 0);
  if (in_parent) field(m, 3, 1);
  if (flags) field(m, 4, *flags);
  if (!compat) field(m, 5, nr);
  return m;
}

}  // namespace

TEST_CASE("a pagemap as CRIU writes it", "[pagemap]") {
  auto image = header(7);
  entry(image, pe(0x400000, 2, kPagesPresent | kPagesLazy));
  entry(image, pe(0x600000, 1, kPagesPresent));
  entry(image, pe(0x700000, 3, std::nullopt, /*compat=*/true));  // old image: present
  entry(image, pe(0x800000, 4, std::nullopt, false, /*in_parent=*/true));
  entry(image, pe(0x900000, 5, kPagesLazy));  // lazy, not in this image
  entry(image, pe(0xa00000, 1, kPagesPresent | kPagesLazy));
  auto pm = parse_pagemap(image);
  REQUIRE(pm);
  CHECK(pm->pages_id == 7);
  REQUIRE(pm->entries.size() == 6);
  CHECK(pm->entries[0].offset == 0);
  CHECK(pm->entries[1].offset == 2 * kPageSize);
  CHECK(pm->entries[2].flags == kPagesPresent);
  CHECK(pm->entries[2].nr_pages == 3);
  CHECK(pm->entries[2].offset == 3 * kPageSize);
  CHECK(pm->entries[3].flags == kPagesInParent);
  CHECK(pm->entries[5].offset == 6 * kPageSize);  // after 2 + 1 + 3 present pages
  CHECK(pm->pages_bytes == 7 * kPageSize);
}

TEST_CASE("an empty pagemap has a head and no entries", "[pagemap]") {
  auto pm = parse_pagemap(header(1));
  REQUIRE(pm);
  CHECK(pm->entries.empty());
  CHECK(pm->pages_bytes == 0);
}

TEST_CASE("what CRIU would not write is refused", "[pagemap]") {
  SECTION("another image's magic") {
    auto image = header(1);
    image[4] = std::byte{0};
    CHECK_FALSE(parse_pagemap(image));
  }
  SECTION("no head") {
    std::vector<std::byte> image;
    put_u32(image, 0x54564319);
    put_u32(image, 0x56084025);
    CHECK_FALSE(parse_pagemap(image));
  }
  SECTION("an entry cut off") {
    auto image = header(1);
    entry(image, pe(0x400000, 2, kPagesPresent));
    image.pop_back();
    auto pm = parse_pagemap(image);
    REQUIRE_FALSE(pm);
    CHECK(pm.error().message.find("cut off") != std::string::npos);
  }
  SECTION("entries out of order or overlapping") {
    auto image = header(1);
    entry(image, pe(0x400000, 2, kPagesPresent));
    entry(image, pe(0x401000, 1, kPagesPresent));
    CHECK_FALSE(parse_pagemap(image));
  }
  SECTION("an address not on a page") {
    auto image = header(1);
    entry(image, pe(0x400010, 1, kPagesPresent));
    CHECK_FALSE(parse_pagemap(image));
  }
  SECTION("a range past the end of the address space") {
    auto image = header(1);
    entry(image, pe(0xfffffffffffff000, 2, kPagesPresent));
    CHECK_FALSE(parse_pagemap(image));
  }
}
