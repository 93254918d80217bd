// A checkpoint read while it is still arriving (store/incoming.h): the reader opens it from the
// incoming manifest, waits for each chunk not yet sealed and gets the same bytes; it stops with
// the transfer's error when the transfer failed, when its process is gone, and when nothing
// arrives for too long.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <thread>

#include "gcr/store_backend.h"
#include "gcr/store_transfer.h"
#include "store/backend_chunks.h"
#include "store/incoming.h"
#include "store/layout.h"
#include "test_util.h"

using namespace gcr;
using namespace gcr::store;
namespace fs = std::filesystem;

namespace {

struct Source {
  ScratchDir dir;
  std::shared_ptr<Store> store = test::open_store(dir.path() / "a");
  std::vector<std::byte> data = test::random_bytes(6 << 20, 77);
  CheckpointId id;
  std::vector<std::byte> manifest_bytes;

  Source() {
    auto w = store->begin_checkpoint({{"pid", "5"}}, std::nullopt);
    REQUIRE(w);
    REQUIRE((*w)->add_region(0x10000, data, 0, true));
    auto c = (*w)->commit(std::nullopt);
    REQUIRE(c);
    id = c->id;
    std::ifstream f(dir.path() / "a" / "manifests" / (id.hex() + ".manifest"), std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    auto b = test::as_bytes(text);
    manifest_bytes.assign(b.begin(), b.end());
  }
};

// Store b, where src's checkpoint is announced and nothing of it has arrived yet.
struct Arriving {
  fs::path dest;
  std::unique_ptr<Backend> to;
  Layout layout;
  std::shared_ptr<Store> store;

  explicit Arriving(Source& src)
      : dest(src.dir.path() / "b"), to(test::dir_backend(dest)), layout{dest} {
    REQUIRE(announce_incoming(layout, src.id, src.manifest_bytes));
    store = test::open_store(dest);
  }
};

}  // namespace

TEST_CASE("a checkpoint is read while it arrives, chunk by chunk", "[incoming]") {
  Source src;
  Arriving b(src);
  auto& [dest, to, layout, store] = b;
  CHECK(!store->open_checkpoint(src.id));  // not committed: only an arriving reader opens it
  auto reader = store->open_checkpoint(src.id, /*arriving=*/true);
  REQUIRE(reader);
  const ObjectEntry* region = nullptr;
  for (const auto& o : (*reader)->manifest().objects) {
    if (o.kind == ObjectKind::device_region) region = &o;
  }
  REQUIRE(region != nullptr);

  std::thread pull([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto from = test::dir_backend(src.dir.path() / "a");
    TransferOptions o;
    o.pack_target_bytes = 1 << 20;  // packs sealed one after another
    auto r = copy_checkpoint(*from, *to, src.id, o);
    REQUIRE(r);
    incoming_done(layout, src.id);
  });
  std::vector<std::byte> out(region->size);
  Status s = (*reader)->read(*region, 0, out);
  pull.join();
  REQUIRE(s);
  CHECK(out == src.data);
  CHECK(!fs::exists(incoming_manifest_path(layout, src.id)));
  CHECK(store->open_checkpoint(src.id));
}

TEST_CASE("a reader stops waiting when the transfer failed or ended", "[incoming]") {
  Source src;
  Arriving b(src);
  auto& [dest, to, layout, store] = b;
  auto reader = store->open_checkpoint(src.id, true);
  REQUIRE(reader);
  const ObjectEntry& region = (*reader)->manifest().objects.front();
  std::vector<std::byte> out(std::min<std::uint64_t>(region.size, 1 << 20));

  SECTION("failed: its error") {
    incoming_failed(layout, src.id, "GET s3://b/x: HTTP 503");
    Status s = (*reader)->read(region, 0, out);
    REQUIRE(!s);
    CHECK_THAT(s.error().message, Catch::Contains("HTTP 503") && Catch::Contains("failed"));
  }
  SECTION("its process is gone") {
    std::ofstream(dest / "incoming" / (src.id.hex() + ".owner")) << "999999 1";
    Status s = (*reader)->read(region, 0, out);
    REQUIRE(!s);
    CHECK_THAT(s.error().message, Catch::Contains("ended before it came"));
  }
  SECTION("nothing arrives") {
    StoreOptions quick;  // as GCR_ARRIVAL_IDLE_S=1 would
    quick.arrival_idle = std::chrono::seconds(1);
    auto impatient = test::open_store(dest, quick)->open_checkpoint(src.id, true);
    REQUIRE(impatient);
    auto t0 = std::chrono::steady_clock::now();
    Status s = (*impatient)->read(region, 0, out);
    REQUIRE(!s);
    CHECK(s.error().code == Errc::timeout);
    CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::seconds(1));
  }
}

TEST_CASE("a staged transfer brings each stage whole, in its order, before the rest",
          "[incoming]") {
  Source src;
  auto from = test::dir_backend(src.dir.path() / "a");
  auto to = test::dir_backend(src.dir.path() / "b");
  auto m = src.store->read_manifest(src.id);
  REQUIRE(m);
  std::vector<ChunkId> all;
  for (const auto& c : m->chunks) all.push_back(c.id);
  REQUIRE(all.size() >= 3);
  TransferOptions o;
  o.pack_target_bytes = 1;  // one chunk a pack: the order shows in the packs
  o.stages = {{all.back()}, {all[1], all[0]}};
  std::vector<std::size_t> packs_at_stage;
  o.stage_done = [&](std::size_t) {
    auto packs = list_packs(*to);
    REQUIRE(packs);
    packs_at_stage.push_back(packs->indexed.size());
  };
  auto r = copy_checkpoint(*from, *to, src.id, o);
  REQUIRE(r);
  CHECK(packs_at_stage == std::vector<std::size_t>{1, 3});
  CHECK(r->chunks_copied == all.size());
}
