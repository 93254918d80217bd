// Dedup at every level, reported per checkpoint (STATS) and per store (usage): zero chunks, within
// a checkpoint, across checkpoints of one process (the parent chain), across processes. A chunk
// already in the store is never written again; incompressible data is stored raw after a probe.
#include <catch2/catch.hpp>

#include "store/catalog.h"
#include "store/layout.h"
#include "test_util.h"

using namespace gcr;
using namespace gcr::store;

namespace {

constexpr std::uint32_t kChunk = 64 * 1024;

std::shared_ptr<Store> small_chunk_store(const std::filesystem::path& root) {
  StoreOptions o;
  o.chunk_bytes = kChunk;
  return test::open_store(root, o);
}

std::uint64_t pack_bytes_on_disk(const std::filesystem::path& root) {
  std::uint64_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(root / "packs")) {
    if (e.path().extension() == ".pack") n += e.file_size();
  }
  return n;
}

}  // namespace

TEST_CASE("zero chunks and repeats within a checkpoint are counted, not stored", "[dedup]") {
  ScratchDir dir;
  auto store = small_chunk_store(dir.path() / "s");
  auto a = test::random_bytes(4 * kChunk, 1);
  std::vector<std::byte> region = a;
  region.insert(region.end(), a.begin(), a.end());  // the same 4 chunks again
  region.resize(region.size() + 2 * kChunk);        // and 2 zero chunks
  auto w = store->begin_checkpoint({}, std::nullopt);
  REQUIRE((*w)->add_region(0x1000, region, 0, true));
  REQUIRE((*w)->add_blob("copy", a));  // a third time, as a blob
  auto c = (*w)->commit({});
  REQUIRE(c);
  const auto& s = c->stats;
  CHECK(s.at("logical_bytes") == region.size() + a.size());
  CHECK(s.at("new_bytes") == 4 * kChunk);
  CHECK(s.at("new_chunks") == 4);
  CHECK(s.at("zero_bytes") == 2 * kChunk);
  CHECK(s.at("dup_self_bytes") == 8 * kChunk);
  CHECK(s.at("dup_parent_bytes") == 0);
  CHECK(s.at("dup_other_bytes") == 0);
  CHECK(s.at("chunks") == 14);
  CHECK(pack_bytes_on_disk(dir.path() / "s") < 5 * kChunk);
  auto m = store->read_manifest(c->id);
  REQUIRE(m);
  int zero = 0, self = 0;
  for (const auto& ref : m->chunks) {
    zero += ref.dedup == DedupClass::zero;
    self += ref.dedup == DedupClass::self;
  }
  CHECK(zero == 2);
  CHECK(self == 8);
}

TEST_CASE(
    "the next checkpoint of a process dedups against its lineage, another's against the "
    "store",
    "[dedup]") {
  ScratchDir dir;
  auto root = dir.path() / "s";
  auto store = small_chunk_store(root);
  auto v1 = test::random_bytes(8 * kChunk, 1);
  auto w1 = store->begin_checkpoint({}, std::nullopt);
  REQUIRE((*w1)->add_region(0x1000, v1, 0, true));
  auto c1 = (*w1)->commit({});
  REQUIRE(c1);
  std::uint64_t after_first = pack_bytes_on_disk(root);

  // Same process, two chunks changed, a grandchild too: lineage reaches grandparents.
  auto v2 = v1;
  auto fresh = test::random_bytes(2 * kChunk, 2);
  std::copy(fresh.begin(), fresh.end(), v2.begin() + 3 * kChunk);
  auto w2 = store->begin_checkpoint({}, c1->id);
  REQUIRE((*w2)->add_region(0x1000, v2, 0, true));
  auto c2 = (*w2)->commit({});
  REQUIRE(c2);
  CHECK(c2->stats.at("new_bytes") == 2 * kChunk);
  CHECK(c2->stats.at("dup_parent_bytes") == 6 * kChunk);
  CHECK(c2->stats.at("dup_other_bytes") == 0);
  CHECK(store->read_manifest(c2->id)->meta.at("parent") == c1->id.hex());

  auto w3 = store->begin_checkpoint({}, c2->id);
  REQUIRE((*w3)->add_region(0x1000, v1, 0, true));  // back to v1: grandparent's chunks
  auto c3 = (*w3)->commit({});
  REQUIRE(c3);
  CHECK(c3->stats.at("new_bytes") == 0);
  CHECK(c3->stats.at("dup_parent_bytes") == 8 * kChunk);

  // Another process (no parent) with the same weights: dedup across processes.
  auto w4 = store->begin_checkpoint({}, std::nullopt);
  REQUIRE((*w4)->add_region(0x9000, v1, 0, true));
  auto c4 = (*w4)->commit({});
  REQUIRE(c4);
  CHECK(c4->stats.at("new_bytes") == 0);
  CHECK(c4->stats.at("dup_other_bytes") == 8 * kChunk);

  // Nothing already in the store was written again.
  CHECK(pack_bytes_on_disk(root) < after_first + 2 * kChunk + 4096);

  SECTION("usage adds the levels up per checkpoint and for the store") {
    auto u2 = store->usage(c2->id);
    REQUIRE(u2);
    CHECK(u2->checkpoints == 1);
    CHECK(u2->logical_bytes == 8 * kChunk);
    CHECK(u2->fresh_bytes == 2 * kChunk);
    CHECK(u2->lineage_bytes == 6 * kChunk);
    CHECK(u2->stored_bytes == 2 * kChunk);  // raw: incompressible
    auto all = store->usage(std::nullopt);
    REQUIRE(all);
    CHECK(all->checkpoints == 4);
    CHECK(all->logical_bytes == 32 * kChunk);
    CHECK(all->fresh_bytes == 10 * kChunk);
    CHECK(all->lineage_bytes == 14 * kChunk);
    CHECK(all->other_bytes == 8 * kChunk);
    CHECK(all->stored_bytes == 10 * kChunk);
    CHECK(all->garbage_bytes == 0);
    CHECK(all->pack_file_bytes == pack_bytes_on_disk(root));
    REQUIRE(store->remove(c1->id));
    REQUIRE(store->remove(c3->id));
    REQUIRE(store->remove(c4->id));
    auto after = store->usage(std::nullopt);
    CHECK(after->checkpoints == 1);
    CHECK(after->garbage_bytes > 0);  // v1's two replaced chunks
  }
}

TEST_CASE("a region unchanged since the parent is taken from it without reading any data",
          "[dedup]") {
  ScratchDir dir;
  auto store = small_chunk_store(dir.path() / "s");
  auto v = test::random_bytes(3 * kChunk, 1);
  v.resize(v.size() + kChunk);                            // a zero chunk
  for (int i = 0; i < 5; ++i) v.push_back(std::byte{1});  // and a short last chunk
  auto w1 = store->begin_checkpoint({}, std::nullopt);
  REQUIRE((*w1)->add_region(0x5000, v, 2, true));
  auto c1 = (*w1)->commit({});
  auto w2 = store->begin_checkpoint({}, c1->id);
  REQUIRE(w2);
  CHECK((*w2)->add_region_from_parent(0x5000, v.size() + 1, 2).error().code ==
        Errc::invalid_argument);
  auto w3 = store->begin_checkpoint({}, c1->id);
  CHECK((*w3)->add_region_from_parent(0x6000, v.size(), 2).error().code == Errc::not_found);
  auto w4 = store->begin_checkpoint({}, c1->id);
  REQUIRE((*w4)->add_region_from_parent(0x5000, v.size(), 2));
  auto c4 = (*w4)->commit({});
  REQUIRE(c4);
  CHECK(c4->stats.at("dup_parent_bytes") == 3 * kChunk + 5);
  CHECK(c4->stats.at("zero_bytes") == kChunk);
  auto r = store->open_checkpoint(c4->id);
  REQUIRE(r);
  CHECK_FALSE((*r)->manifest().objects[0].dirty);
  CHECK(test::read_object(**r, (*r)->manifest().objects[0]) == v);
}

TEST_CASE("incompressible data is stored raw with only a probe; text is compressed", "[dedup]") {
  ScratchDir dir;
  auto root = dir.path() / "s";
  auto store = test::open_store(root);
  auto noise = test::random_bytes(4 << 20, 1);
  auto text = test::text_bytes(2 << 20, 2);
  auto w = store->begin_checkpoint({}, std::nullopt);
  REQUIRE((*w)->add_region(0x1000, noise, 0, true));
  auto c = (*w)->commit({});
  REQUIRE(c);
  CHECK(c->stats.at("compress_input_bytes") == 0);  // never a full compression pass
  CHECK(c->stats.at("compress_probe_bytes") == 4 * 16384);
  CHECK(c->stats.at("stored_bytes") == noise.size());

  auto w2 = store->begin_checkpoint({}, std::nullopt);
  REQUIRE((*w2)->add_region(0x1000, text, 0, true));
  auto c2 = (*w2)->commit({});
  REQUIRE(c2);
  CHECK(c2->stats.at("stored_bytes") < text.size() / 2);

  // The pack indexes say so too.
  PackCatalog catalog(Layout{root});
  REQUIRE(catalog.refresh());
  auto m1 = store->read_manifest(c->id);
  for (const auto& ref : m1->chunks) {
    auto loc = catalog.find(ref.id);
    REQUIRE(loc);
    CHECK(loc->entry.codec == Codec::raw);
    CHECK(loc->entry.stored_bytes == ref.raw_bytes);
  }
  auto m2 = store->read_manifest(c2->id);
  for (const auto& ref : m2->chunks) CHECK(catalog.find(ref.id)->entry.codec == Codec::zstd);
  auto r = store->open_checkpoint(c2->id);
  CHECK(test::read_object(**r, (*r)->manifest().objects[0]) == text);
}

TEST_CASE("page images dedup across checkpoints when a page is inserted", "[dedup]") {
  ScratchDir dir;
  auto store = test::open_store(dir.path() / "s");
  auto pages = test::random_bytes(8 << 20, 1);
  test::write_file(dir.path() / "p1", pages);
  auto w1 = store->begin_checkpoint({}, std::nullopt);
  REQUIRE((*w1)->add_file("pages-1.img", 0600, dir.path() / "p1"));
  auto c1 = (*w1)->commit({});
  REQUIRE(c1);
  auto page = test::random_bytes(4096, 2);
  pages.insert(pages.begin() + (3 << 20) + 4096 * 3, page.begin(), page.end());
  test::write_file(dir.path() / "p2", pages);
  auto w2 = store->begin_checkpoint({}, c1->id);
  REQUIRE((*w2)->add_file("pages-1.img", 0600, dir.path() / "p2"));
  auto c2 = (*w2)->commit({});
  REQUIRE(c2);
  CHECK(c2->stats.at("dup_parent_bytes") > pages.size() * 9 / 10);
  CHECK(c2->stats.at("new_bytes") < 512 * 1024);
  auto r = store->open_checkpoint(c2->id);
  CHECK(test::read_object(**r, (*r)->manifest().objects[0]) == pages);
}

TEST_CASE("a writer dropped without commit leaves nothing visible and no pack behind", "[dedup]") {
  ScratchDir dir;
  auto root = dir.path() / "s";
  auto store = test::open_store(root);
  {
    auto w = store->begin_checkpoint({}, std::nullopt);
    auto data = test::random_bytes(3 << 20, 1);
    REQUIRE((*w)->add_region(0x1000, data, 0, true));
  }
  CHECK(store->list()->empty());
  CHECK(test::count_files(root / "packs") == 0);
  CHECK(test::count_files(root / "tmp") == 0);
}

TEST_CASE("a writer splits its data over packs of the target size", "[dedup]") {
  ScratchDir dir;
  auto root = dir.path() / "s";
  StoreOptions o;
  o.pack_target_bytes = 1 << 20;
  o.chunk_bytes = 256 * 1024;
  auto store = test::open_store(root, o);
  auto data = test::random_bytes(5 << 20, 1);
  auto w = store->begin_checkpoint({}, std::nullopt);
  REQUIRE((*w)->add_region(0x1000, data, 0, true));
  auto c = (*w)->commit({});
  REQUIRE(c);
  CHECK(test::count_files(root / "packs", ".pack") >= 4);
  CHECK(test::count_files(root / "packs", ".idx") == test::count_files(root / "packs", ".pack"));
  auto r = store->open_checkpoint(c->id);
  CHECK(test::read_object(**r, (*r)->manifest().objects[0]) == data);
}
