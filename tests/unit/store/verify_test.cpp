// verify: any damaged byte is found, and named by checkpoint, object and chunk.
#include <catch2/catch.hpp>

#include <fstream>

#include "store/catalog.h"
#include "store/layout.h"
#include "test_util.h"

using namespace gcr;
using namespace gcr::store;

namespace {

void flip_byte(const std::filesystem::path& path, std::uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x20);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

}  // namespace

TEST_CASE("a flipped byte in a pack is found by verify, naming checkpoint, object and chunk",
          "[verify]") {
  ScratchDir dir;
  auto root = dir.path() / "s";
  StoreOptions o;
  o.chunk_bytes = 64 * 1024;
  auto store = test::open_store(root, o);
  auto region = test::random_bytes(4 * 64 * 1024, 1);
  auto text = test::text_bytes(4 * 64 * 1024, 2);
  auto w = store->begin_checkpoint({}, std::nullopt);
  REQUIRE((*w)->add_region(0x7f0000001000, region, 0, true));
  REQUIRE((*w)->add_blob("state", text));
  auto c = (*w)->commit("job");
  REQUIRE(c);
  auto clean = store->verify(std::nullopt);
  REQUIRE(clean);
  CHECK(clean->problems.empty());
  CHECK(clean->checkpoints == 1);
  CHECK(clean->chunks == 8);
  CHECK(clean->bytes == region.size() + text.size());

  auto m = store->read_manifest(c->id);
  PackCatalog catalog(Layout{root});
  REQUIRE(catalog.refresh());
  SECTION("in a raw payload") {
    const ChunkRef& victim = m->chunks[2];  // the region's third chunk
    auto loc = catalog.find(victim.id);
    REQUIRE(loc);
    flip_byte(Layout{root}.pack(loc->pack), loc->entry.offset + 32 + 1000);
    std::uint64_t last_done = 0;
    auto report = store->verify(std::nullopt, [&](std::uint64_t d, std::uint64_t t) {
      CHECK(d <= t);
      last_done = d;
    });
    REQUIRE(report);
    CHECK(last_done == region.size() + text.size());
    REQUIRE(report->problems.size() == 1);
    const auto& p = report->problems[0];
    CHECK_THAT(p.checkpoint, Catch::Contains(c->id.hex()) && Catch::Contains("job"));
    CHECK(p.object == "region 0x7f0000001000 (device 0)");
    CHECK(p.chunk == victim.id.hex());
    CHECK_THAT(p.what, Catch::Contains("checksum mismatch") &&
                           Catch::Contains("offset " + std::to_string(loc->entry.offset)));
    // A reader refuses the damaged chunk too; the other chunks still read.
    auto r = store->open_checkpoint(c->id);
    REQUIRE(r);
    std::vector<std::byte> out(region.size());
    auto bad = (*r)->read((*r)->manifest().objects[0], 0, out);
    REQUIRE_FALSE(bad);
    CHECK(bad.error().code == Errc::corrupt_image);
    std::vector<std::byte> first(64 * 1024);
    CHECK((*r)->read((*r)->manifest().objects[0], 0, first));
  }
  SECTION("in a compressed payload") {
    const ChunkRef& victim = m->chunks[5];  // the blob's second chunk
    auto loc = catalog.find(victim.id);
    REQUIRE(loc->entry.codec == Codec::zstd);
    flip_byte(Layout{root}.pack(loc->pack), loc->entry.offset + 32 + loc->entry.stored_bytes / 2);
    auto report = store->verify(c->id);
    REQUIRE(report);
    REQUIRE(report->problems.size() == 1);
    CHECK(report->problems[0].object == "blob state");
    CHECK(report->problems[0].chunk == victim.id.hex());
  }
  SECTION("in a record header") {
    auto loc = catalog.find(m->chunks[0].id);
    flip_byte(Layout{root}.pack(loc->pack), loc->entry.offset + 9);
    auto report = store->verify(std::nullopt);
    REQUIRE(report->problems.size() == 1);
    CHECK_THAT(report->problems[0].what, Catch::Contains("record sizes"));
  }
  SECTION("a truncated pack") {
    auto loc = catalog.find(m->chunks[0].id);
    std::filesystem::resize_file(Layout{root}.pack(loc->pack), 100);
    auto report = store->verify(std::nullopt);
    CHECK(report->problems.size() == 8);
    CHECK_FALSE(store->open_checkpoint(c->id));
  }
  SECTION("a pack lost while its index stays: damage, not a missing checkpoint") {
    auto loc = catalog.find(m->chunks[0].id);
    std::filesystem::remove(Layout{root}.pack(loc->pack));
    auto report = store->verify(std::nullopt);
    REQUIRE(report);
    CHECK(report->problems.size() == 8);
    auto r = store->open_checkpoint(c->id);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::corrupt_image);
    CHECK_THAT(r.error().message, Catch::Contains("is missing") && Catch::Contains("verify"));
  }
  SECTION("a damaged pack index") {
    auto loc = catalog.find(m->chunks[0].id);
    flip_byte(Layout{root}.index(loc->pack), 70);
    auto report = store->verify(std::nullopt);
    REQUIRE(report);
    CHECK(report->problems.size() == 9);  // the index, and each chunk it held
    // A store opened afresh (another process) cannot find the chunks any more.
    auto fresh = test::open_store(root);
    auto r = fresh->open_checkpoint(c->id);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains("in no sealed pack"));
  }
  SECTION("a damaged manifest") {
    flip_byte(root / "manifests" / (c->id.hex() + ".manifest"), 100);
    auto report = store->verify(std::nullopt);
    REQUIRE(report);
    REQUIRE(report->problems.size() == 1);
    CHECK_THAT(report->problems[0].what, Catch::Contains("body hash"));
    auto g = store->gc();  // gc must not guess: it deletes nothing
    REQUIRE_FALSE(g);
    CHECK_THAT(g.error().message, Catch::Contains("deleted nothing"));
    CHECK(test::count_files(root / "packs") == 2);
  }
}
