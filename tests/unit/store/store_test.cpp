// Store: names and ids (tags, id prefixes, hostile names), listing, tagging and removal.
#include <catch2/catch.hpp>

#include <fstream>

#include "test_util.h"

using namespace gcr;
using namespace gcr::store;

namespace {

CheckpointId commit_one(Store& store, std::uint64_t seed, std::optional<std::string> tag = {}) {
  auto w = store.begin_checkpoint({{"pid", "42"}}, std::nullopt);
  REQUIRE(w);
  auto data = test::random_bytes(5000, seed);
  REQUIRE((*w)->add_region(0x10000, data, 0, true));
  auto c = (*w)->commit(tag);
  REQUIRE(c);
  return c->id;
}

}  // namespace

TEST_CASE("checkpoints are found by tag, by full id and by a unique prefix of 8+ digits",
          "[store]") {
  ScratchDir dir;
  auto store = test::open_store(dir.path() / "s");
  CheckpointId a = commit_one(*store, 1, "job-7");
  CheckpointId b = commit_one(*store, 2);
  CHECK(store->resolve("job-7").value() == a);
  CHECK(store->resolve(a.hex()).value() == a);
  CHECK(store->resolve(b.hex().substr(0, 8)).value() == b);
  std::string upper = b.hex().substr(0, 12);
  for (char& c : upper) c = static_cast<char>(std::toupper(c));
  CHECK(store->resolve(upper).value() == b);
  auto short_prefix = store->resolve(b.hex().substr(0, 7));
  CHECK_FALSE(short_prefix);
  auto none = store->resolve("nope");
  REQUIRE_FALSE(none);
  CHECK(none.error().code == Errc::not_found);
}

TEST_CASE("hostile names never reach outside the store", "[store][hostile]") {
  ScratchDir dir;
  auto root = dir.path() / "s";
  auto store = test::open_store(root);
  CheckpointId a = commit_one(*store, 1);
  // A file outside the store that a traversal would find or overwrite.
  std::ofstream(dir.path() / "x") << a.hex() << "\n";
  for (const std::string& bad :
       std::vector<std::string>{"../x", "a/b", "", ".", "..", std::string(200, 'a'),
                                std::string("x\0y", 3), "/etc/passwd", "tags/../../x"}) {
    INFO(bad);
    auto r = store->resolve(bad);
    REQUIRE_FALSE(r);
    CHECK((r.error().code == Errc::invalid_argument || r.error().code == Errc::not_found));
    auto t = store->tag(a, bad);
    REQUIRE_FALSE(t);
    CHECK(t.error().code == Errc::invalid_argument);
    auto w = store->begin_checkpoint({}, std::nullopt);
    REQUIRE(w);
    REQUIRE((*w)->add_blob("b", test::as_bytes("x")));
    auto c = (*w)->commit(bad);
    REQUIRE_FALSE(c);
    CHECK(c.error().code == Errc::invalid_argument);
  }
  std::ifstream in(dir.path() / "x");
  std::string text;
  in >> text;
  CHECK(text == a.hex());
  CHECK(test::count_files(root / "tags") == 0);
  CHECK(store->list()->size() == 1);  // the refused commits left nothing behind
}

TEST_CASE("hostile file and blob names are refused by the writer", "[store][hostile]") {
  ScratchDir dir;
  auto store = test::open_store(dir.path() / "s");
  test::write_file(dir.path() / "src", test::as_bytes("data"));
  for (const std::string& bad :
       std::vector<std::string>{"../x", "/abs", "a/../b", "", ".", std::string("a\0b", 3)}) {
    auto w = store->begin_checkpoint({}, std::nullopt);
    REQUIRE(w);
    CHECK((*w)->add_file(bad, 0600, dir.path() / "src").error().code == Errc::invalid_argument);
    auto w2 = store->begin_checkpoint({}, std::nullopt);
    REQUIRE(w2);
    CHECK((*w2)->add_blob(bad, test::as_bytes("x")).error().code == Errc::invalid_argument);
  }
}

TEST_CASE(
    "list shows checkpoints with their tags, meta and stats; remove drops them and their tags",
    "[store]") {
  ScratchDir dir;
  auto store = test::open_store(dir.path() / "s");
  CheckpointId a = commit_one(*store, 1, "first");
  CheckpointId b = commit_one(*store, 2);
  REQUIRE(store->tag(b, "second"));
  REQUIRE(store->tag(b, "latest"));
  auto list = store->list();
  REQUIRE(list);
  REQUIRE(list->size() == 2);
  for (const auto& info : *list) {
    CHECK(info.meta.at("pid") == "42");
    CHECK(info.meta.contains("created_unix_ns"));
    CHECK(info.stats.at("logical_bytes") == 5000);
    if (info.id == a) CHECK(info.tags == std::vector<std::string>{"first"});
    if (info.id == b) CHECK(info.tags == std::vector<std::string>{"latest", "second"});
  }
  REQUIRE(store->remove(b));
  CHECK(store->list()->size() == 1);
  CHECK_FALSE(store->resolve("second"));
  CHECK_FALSE(store->resolve("latest"));
  CHECK(store->remove(b).error().code == Errc::not_found);
  // Tag moves: a tag names one checkpoint.
  CheckpointId c = commit_one(*store, 3, "first");
  CHECK(store->resolve("first").value() == c);
}

TEST_CASE("a manifest whose id differs from its file name is refused", "[store][hostile]") {
  ScratchDir dir;
  auto root = dir.path() / "s";
  auto store = test::open_store(root);
  CheckpointId a = commit_one(*store, 1);
  CheckpointId fake = CheckpointId::random();
  std::filesystem::copy_file(root / "manifests" / (a.hex() + ".manifest"),
                             root / "manifests" / (fake.hex() + ".manifest"));
  auto m = store->read_manifest(fake);
  REQUIRE_FALSE(m);
  CHECK(m.error().code == Errc::corrupt_image);
  CHECK_THAT(m.error().message, Catch::Contains("does not match the file name"));
  auto list = store->list();
  REQUIRE(list);
  CHECK(list->size() == 2);  // listed, marked, so that it can be removed
}

TEST_CASE("a writer knows its checkpoint's id before it commits", "[store]") {
  ScratchDir dir;
  auto store = test::open_store(dir.path() / "s");
  auto w = store->begin_checkpoint({}, std::nullopt);
  REQUIRE(w);
  CheckpointId id = (*w)->id();
  REQUIRE((*w)->add_blob("b", test::as_bytes("x")));
  auto c = (*w)->commit({});
  REQUIRE(c);
  CHECK(c->id == id);
  CHECK(store->read_manifest(id));
}
