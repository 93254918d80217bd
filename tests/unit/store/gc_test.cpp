// gc: deletes what no committed manifest names, rewrites packs that are mostly garbage, and never
// touches a chunk a committed checkpoint needs.
#include <catch2/catch.hpp>

#include <fstream>

#include "test_util.h"

using namespace gcr;
using namespace gcr::store;

namespace {

constexpr std::uint32_t kChunk = 64 * 1024;

struct Committed {
  CheckpointId id;
  std::vector<std::byte> data;
};

Committed commit_region(Store& store, std::vector<std::byte> data,
                        std::optional<CheckpointId> parent = {}) {
  auto w = store.begin_checkpoint({}, parent);
  REQUIRE(w);
  REQUIRE((*w)->add_region(0x1000, data, 0, true));
  auto c = (*w)->commit({});
  REQUIRE(c);
  return {c->id, std::move(data)};
}

void check_reads_back(Store& store, const Committed& c) {
  auto r = store.open_checkpoint(c.id);
  REQUIRE(r);
  CHECK(test::read_object(**r, (*r)->manifest().objects[0]) == c.data);
}

}  // namespace

TEST_CASE("gc on a clean store deletes nothing", "[gc]") {
  ScratchDir dir;
  StoreOptions o;
  o.chunk_bytes = kChunk;
  auto store = test::open_store(dir.path() / "s", o);
  auto a = commit_region(*store, test::random_bytes(8 * kChunk, 1));
  auto g = store->gc();
  REQUIRE(g);
  CHECK(g->packs_deleted == 0);
  CHECK(g->packs_rewritten == 0);
  CHECK(g->bytes_freed == 0);
  check_reads_back(*store, a);
}

TEST_CASE("gc deletes packs no checkpoint needs and rewrites packs mostly dead", "[gc]") {
  ScratchDir dir;
  auto root = dir.path() / "s";
  StoreOptions o;
  o.chunk_bytes = kChunk;
  auto store = test::open_store(root, o);
  auto a = commit_region(*store, test::random_bytes(8 * kChunk, 1));
  auto b = commit_region(*store, test::random_bytes(8 * kChunk, 2));
  // c shares one chunk of a's eight.
  auto c_data = test::random_bytes(4 * kChunk, 3);
  std::copy(a.data.begin(), a.data.begin() + kChunk, c_data.begin());
  auto c = commit_region(*store, c_data);
  REQUIRE(store->remove(a.id));
  REQUIRE(store->remove(b.id));
  // Leftovers of a crashed writer: an unsealed pack and a tmp file.
  std::ofstream(root / "packs" / (PackId::random().hex() + ".pack")) << "GCRPACK partial";
  std::ofstream(root / "tmp" / "x.manifest") << "half";

  auto before = store->usage(std::nullopt);
  REQUIRE(before);
  CHECK(before->garbage_bytes > 15 * kChunk);
  auto g = store->gc();
  REQUIRE(g);
  CHECK(g->packs_deleted == 2);    // b's pack, the unsealed one
  CHECK(g->packs_rewritten == 1);  // a's pack: one chunk of eight is live
  CHECK(g->tmp_files_deleted == 1);
  CHECK(g->bytes_freed > 15 * kChunk);
  check_reads_back(*store, c);
  auto after = store->usage(std::nullopt);
  CHECK(after->garbage_bytes == 0);
  auto v = store->verify(std::nullopt);
  REQUIRE(v);
  CHECK(v->problems.empty());
  auto again = store->gc();
  CHECK(again->packs_deleted + again->packs_rewritten == 0);
}

TEST_CASE("gc keeps chunks a later checkpoint took from a removed parent", "[gc]") {
  ScratchDir dir;
  StoreOptions o;
  o.chunk_bytes = kChunk;
  auto store = test::open_store(dir.path() / "s", o);
  auto a = commit_region(*store, test::random_bytes(6 * kChunk, 1));
  auto w = store->begin_checkpoint({}, a.id);
  REQUIRE((*w)->add_region_from_parent(0x1000, a.data.size(), 0));
  auto b = (*w)->commit({});
  REQUIRE(b);
  REQUIRE(store->remove(a.id));
  REQUIRE(store->gc());
  check_reads_back(*store, Committed{b->id, a.data});
}

TEST_CASE("gc removes tags that name removed checkpoints", "[gc]") {
  ScratchDir dir;
  auto root = dir.path() / "s";
  auto store = test::open_store(root);
  auto a = commit_region(*store, test::random_bytes(1000, 1));
  REQUIRE(store->tag(a.id, "keep"));
  std::ofstream(root / "tags" / "stale") << CheckpointId::random().hex() << "\n";
  REQUIRE(store->gc());
  CHECK(std::filesystem::exists(root / "tags" / "keep"));
  CHECK_FALSE(std::filesystem::exists(root / "tags" / "stale"));
}
