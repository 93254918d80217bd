// Transfers between two stores (gcr/store_transfer.h), both local directories here (an S3 endpoint
// is tests/integration/s3's): only missing chunks move, the manifest arrives unchanged and last, a
// damaged record is refused, and the cache store stays within its limit.
#include <catch2/catch.hpp>

#include <fstream>
#include <unordered_map>

#include "gcr/file.h"
#include "gcr/remote_cache.h"
#include "gcr/store_backend.h"
#include "gcr/store_transfer.h"
#include "store/pack_format.h"
#include "test_util.h"

using namespace gcr;
using namespace gcr::store;

namespace {

CheckpointId commit_regions(Store& store, std::vector<std::uint64_t> seeds,
                            std::optional<std::string> tag = {}) {
  auto w = store.begin_checkpoint({{"pid", "42"}}, std::nullopt);
  REQUIRE(w);
  std::uint64_t address = 0x10000;
  for (auto seed : seeds) {
    auto data = seed % 2 == 0 ? test::random_bytes(3 << 20, seed) : test::text_bytes(3 << 20, seed);
    REQUIRE((*w)->add_region(address, data, 0, true));
    address += 16 << 20;
  }
  auto c = (*w)->commit(tag);
  REQUIRE(c);
  return c->id;
}

}  // namespace

TEST_CASE("a transfer moves only the chunks the destination lacks", "[transfer]") {
  ScratchDir dir;
  auto src = test::open_store(dir.path() / "a");
  CheckpointId one = commit_regions(*src, {2, 3}, "one");
  CheckpointId two = commit_regions(*src, {2, 4}, "two");
  auto from = test::dir_backend(dir.path() / "a");
  auto to = test::dir_backend(dir.path() / "b");

  CHECK(resolve_checkpoint(*from, "one").value() == one);
  CHECK(resolve_checkpoint(*from, two.hex().substr(0, 10)).value() == two);

  TransferOptions o;
  o.tag = "one";
  o.pack_target_bytes = 1 << 20;  // several packs, several batches in parallel
  auto r1 = copy_checkpoint(*from, *to, one, o);
  REQUIRE(r1);
  CHECK(r1->chunks_copied == r1->chunks);
  CHECK(r1->present_bytes == 0);
  CHECK(r1->packs_written > 1);

  auto r2 = copy_checkpoint(*from, *to, two, {});
  REQUIRE(r2);
  CHECK(r2->present_bytes == 3u << 20);  // region 2 is shared
  CHECK(r2->chunks_copied == r2->chunks - r2->chunks_present);

  auto again = copy_checkpoint(*from, *to, two, {});
  REQUIRE(again);
  CHECK(again->already_there);

  to.reset();
  auto copy = test::open_store(dir.path() / "b");
  CHECK(copy->resolve("one").value() == one);
  auto report = copy->verify(std::nullopt);
  REQUIRE(report);
  CHECK(report->problems.empty());
  CHECK(report->checkpoints == 2);
}

TEST_CASE("what an earlier transfer left in the destination stands in for its indexes",
          "[transfer]") {
  ScratchDir dir;
  auto src = test::open_store(dir.path() / "a");
  CheckpointId one = commit_regions(*src, {2, 3});
  CheckpointId two = commit_regions(*src, {2, 4});
  CheckpointId three = commit_regions(*src, {2, 6});
  auto from = test::dir_backend(dir.path() / "a");
  auto to = test::dir_backend(dir.path() / "b");
  std::unordered_map<ChunkId, PackId, Id128Hash> known;
  TransferOptions o;
  o.known_in_destination = &known;
  o.pack_target_bytes = 1 << 20;

  auto r1 = copy_checkpoint(*from, *to, one, o);
  REQUIRE(r1);
  CHECK(known.size() == r1->chunks);
  auto r2 = copy_checkpoint(*from, *to, two, o);
  REQUIRE(r2);
  CHECK(r2->present_bytes == 3u << 20);  // region 2, found through `known`
  CHECK(known.size() == r1->chunks + r2->chunks_copied);

  // Stale: the destination lost every pack (gc on another machine, say). `known` still names
  // them; the commit's re-check finds them gone and copies region 2 again.
  for (const auto& e : std::filesystem::directory_iterator(dir.path() / "b" / "packs"))
    std::filesystem::remove(e.path());
  auto r3 = copy_checkpoint(*from, *to, three, o);
  REQUIRE(r3);
  CHECK(r3->chunks_copied == r3->chunks);
  to.reset();
  auto copy = test::open_store(dir.path() / "b");
  auto report = copy->verify(three);
  REQUIRE(report);
  CHECK(report->problems.empty());
}

TEST_CASE("a damaged record in the source is refused, and nothing is committed", "[transfer]") {
  ScratchDir dir;
  auto src = test::open_store(dir.path() / "a");
  CheckpointId one = commit_regions(*src, {2});
  for (const auto& e : std::filesystem::directory_iterator(dir.path() / "a" / "packs")) {
    if (e.path().extension() != ".pack") continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  auto from = test::dir_backend(dir.path() / "a");
  auto to = test::dir_backend(dir.path() / "b");
  auto r = copy_checkpoint(*from, *to, one, {});
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::corrupt_image);
  CHECK_FALSE(std::filesystem::exists(dir.path() / "b" / "manifests" / (one.hex() + ".manifest")));
}

// Every record of a store's packs with padding after its payload: its pack file and the offset of
// its first padding byte.
std::vector<std::pair<std::filesystem::path, std::uint64_t>> padded_records(
    const std::filesystem::path& store) {
  std::vector<std::pair<std::filesystem::path, std::uint64_t>> out;
  for (const auto& e : std::filesystem::directory_iterator(store / "packs")) {
    if (e.path().extension() != ".idx") continue;
    auto bytes = io::read_file(e.path(), 1 << 30);
    REQUIRE(bytes);
    auto index = decode_pack_index(*bytes, e.path().string());
    REQUIRE(index);
    auto pack = e.path();
    pack.replace_extension(".pack");
    for (const IndexEntry& r : index->entries)
      if (r.record_bytes() > kRecordHeaderBytes + r.stored_bytes)
        out.emplace_back(pack, r.offset + kRecordHeaderBytes + r.stored_bytes);
  }
  return out;
}

char byte_at(const std::filesystem::path& file, std::uint64_t offset) {
  std::ifstream f(file, std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  return static_cast<char>(f.get());
}

TEST_CASE("a record's padding arrives as zeros, whatever the source held there", "[transfer]") {
  ScratchDir dir;
  auto src = test::open_store(dir.path() / "a");
  CheckpointId one = commit_regions(*src, {3, 5});  // text: compressed, payloads of any length
  auto padded = padded_records(dir.path() / "a");
  REQUIRE(padded.size() >= 2);
  {
    std::fstream f(padded[0].first, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(padded[0].second));
    f.put('\x5a');
  }
  auto from = test::dir_backend(dir.path() / "a");
  auto to = test::dir_backend(dir.path() / "b");
  TransferOptions o;
  o.pack_target_bytes = 1 << 20;
  REQUIRE(copy_checkpoint(*from, *to, one, o));
  to.reset();
  auto copied = padded_records(dir.path() / "b");
  CHECK(copied.size() == padded.size());
  for (const auto& [pack, offset] : copied) CHECK(byte_at(pack, offset) == 0);
  auto report = test::open_store(dir.path() / "b")->verify(one);
  REQUIRE(report);
  CHECK(report->problems.empty());
}

TEST_CASE("the cache store is trimmed to its limit, least recently used first",
          "[transfer][cache]") {
  ScratchDir dir;
  auto store = test::open_store(dir.path() / "c");
  CheckpointId a = commit_regions(*store, {10});
  CheckpointId b = commit_regions(*store, {12});
  CheckpointId c = commit_regions(*store, {14});
  touch_cached_checkpoint(dir.path() / "c", a);  // a used last: b is the oldest
  store.reset();
  auto removed = trim_cache_store(dir.path() / "c", 7u << 20, c);
  REQUIRE(removed);
  CHECK(*removed == 1);
  auto after = test::open_store(dir.path() / "c");
  CHECK(after->resolve(a.hex()));
  CHECK_FALSE(after->resolve(b.hex()));
  CHECK(after->resolve(c.hex()));
}
