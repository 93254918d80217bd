// Named crash points (GCR_FAULT): a writer or gc that dies at each step of the commit or the
// collection leaves every committed checkpoint intact; a checkpoint exists exactly when its
// manifest was renamed into place; gc removes the rest.
#include "itest_util.h"

using namespace gcr::store;
using namespace gcr::store::itest;

TEST_CASE("a writer that dies at any named step leaves the store consistent", "[fault]") {
  struct Point {
    const char* name;
    bool committed;  // the checkpoint exists afterwards
  };
  auto point = GENERATE(Point{"after-pack-create", false}, Point{"after-chunk-write", false},
                        Point{"after-pack-sync", false}, Point{"after-index-rename", false},
                        Point{"before-manifest-rename", false},
                        Point{"after-manifest-rename", true}, Point{"after-tag-rename", true});
  INFO("GCR_FAULT=" << point.name);
  ScratchDir dir;
  auto root = dir.path() / "store";
  auto scratch = dir.path() / "scratch";
  auto first = run_writer({"write", root, "1", "1024", scratch, "-", "first"});
  REQUIRE(first.code == 0);
  auto r = run_writer({"write", root, "2", "1024", scratch, first.out.substr(0, 32), "second"},
                      {std::string("GCR_FAULT=") + point.name});
  REQUIRE(r.exited);
  CHECK(r.code == 86);
  CHECK(check_store(root) == (point.committed ? 2u : 1u));
  auto store = open_fresh(root);
  CHECK(store->resolve("first"));
  if (std::string(point.name) == "after-tag-rename") CHECK(store->resolve("second"));
  check_clean_after_gc(root);
  CHECK(check_store(root) == (point.committed ? 2u : 1u));
  // The store takes new checkpoints afterwards.
  REQUIRE(run_writer({"write", root, "3", "1024", scratch}).code == 0);
  CHECK(check_store(root) == (point.committed ? 3u : 2u));
}

TEST_CASE("a gc that dies while rewriting or deleting a pack loses nothing", "[fault]") {
  auto point = GENERATE("gc-after-rewrite", "gc-after-index-delete");
  INFO("GCR_FAULT=" << point);
  ScratchDir dir;
  auto root = dir.path() / "store";
  auto scratch = dir.path() / "scratch";
  // The second checkpoint shares a quarter of the first one's region and most of its page
  // image; the third shares nothing of its own. Removing the first and the third leaves one pack
  // less than half live (rewritten) and one dead (deleted).
  std::vector<std::string> ids;
  for (auto [seed, kib] : {std::pair{1, "4096"}, {2, "1024"}, {3, "1024"}}) {
    auto r = run_writer({"write", root, std::to_string(seed), kib, scratch});
    REQUIRE(r.code == 0);
    ids.push_back(r.out.substr(0, 32));
  }
  {
    auto store = open_fresh(root);
    REQUIRE(store->remove(*Id128::from_hex(ids[0])));
    REQUIRE(store->remove(*Id128::from_hex(ids[2])));
  }
  auto r = run_writer({"gc", root}, {std::string("GCR_FAULT=") + point});
  REQUIRE(r.exited);
  CHECK(r.code == 86);
  CHECK(check_store(root) == 1);
  check_clean_after_gc(root);
  CHECK(check_store(root) == 1);
}
