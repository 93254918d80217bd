// Chunk boundaries: fixed for regions, content-defined at page boundaries for CRIU page images.
#include <catch2/catch.hpp>

#include <numeric>
#include <set>

#include "store/chunker.h"
#include "store/hash.h"
#include "test_util.h"

using namespace gcr::store;

namespace {
std::vector<ChunkId> ids_of(std::span<const std::byte> data,
                            const std::vector<std::uint32_t>& sizes) {
  std::vector<ChunkId> ids;
  std::size_t at = 0;
  for (auto s : sizes) {
    ids.push_back(chunk_id_of(data.subspan(at, s)));
    at += s;
  }
  return ids;
}
}  // namespace

TEST_CASE("fixed chunking cuts every chunk_bytes from the start", "[chunker]") {
  CHECK(cut_fixed(0, 1024).empty());
  CHECK(cut_fixed(1024, 1024) == std::vector<std::uint32_t>{1024});
  CHECK(cut_fixed(2500, 1024) == std::vector<std::uint32_t>{1024, 1024, 452});
}

TEST_CASE("page chunks are whole pages of 16 KiB to 1 MiB, about 64 KiB on average", "[chunker]") {
  auto data = test::random_bytes(32 << 20, 7);
  auto sizes = cut_pages(data, true);
  CHECK(std::accumulate(sizes.begin(), sizes.end(), std::uint64_t{0}) == data.size());
  for (std::size_t i = 0; i + 1 < sizes.size(); ++i) {
    CHECK(sizes[i] % kPageBytes == 0);
    CHECK(sizes[i] >= kCdcMinBytes);
    CHECK(sizes[i] <= kCdcMaxBytes);
  }
  double mean = double(data.size()) / double(sizes.size());
  CHECK(mean > 48 * 1024);
  CHECK(mean < 112 * 1024);
}

TEST_CASE("identical pages force a cut at 1 MiB", "[chunker]") {
  std::vector<std::byte> same(3 << 20, std::byte{0x5a});
  auto sizes = cut_pages(same, true);
  // A page of 0x5a either always cuts or never does; either way no chunk exceeds the maximum.
  for (auto s : sizes) CHECK(s <= kCdcMaxBytes);
}

TEST_CASE("cutting window by window with a carried tail gives the same chunks as cutting once",
          "[chunker]") {
  auto data = test::random_bytes(10 << 20, 8);
  auto whole = cut_pages(data, true);
  std::vector<std::uint32_t> pieces;
  std::size_t start = 0;
  const std::size_t window = (3 << 20) + 4096 * 5;
  for (std::size_t end = window;; end += window) {
    bool final = end >= data.size();
    end = std::min(end, data.size());
    auto part = cut_pages(std::span(data).subspan(start, end - start), final);
    for (auto s : part) start += s;
    pieces.insert(pieces.end(), part.begin(), part.end());
    if (final) break;
  }
  CHECK(pieces == whole);
}

TEST_CASE("a page inserted into a page image changes only the chunks around it", "[chunker]") {
  auto before = test::random_bytes(8 << 20, 9);
  auto after = before;
  auto page = test::random_bytes(kPageBytes, 10);
  after.insert(after.begin() + (4 << 20), page.begin(), page.end());
  auto a = ids_of(before, cut_pages(before, true));
  auto b = ids_of(after, cut_pages(after, true));
  std::set<ChunkId> old(a.begin(), a.end());
  std::size_t shared = 0;
  for (const auto& id : b) shared += old.count(id);
  CHECK(shared + 3 >= b.size());  // at most a few chunks differ
}

TEST_CASE("page images are recognised by their file name", "[chunker]") {
  CHECK(is_page_image("pages-1.img"));
  CHECK(is_page_image("sub/pages-12.img"));
  CHECK_FALSE(is_page_image("pagemap-1.img"));
  CHECK_FALSE(is_page_image("pages-1.img.bak"));
  CHECK_FALSE(is_page_image("core-1.img"));
}
