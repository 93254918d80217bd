// gc beside writers: gc running in a loop while checkpoints are written (by a thread of this
// process, and by other processes) never deletes a chunk a committed or committing checkpoint
// names; afterwards every committed checkpoint reads back bit-exact.
#include <atomic>
#include <thread>

#include "itest_util.h"

using namespace gcr;
using namespace gcr::store;
using namespace gcr::store::itest;

namespace {

// Writes content_for(seed) in this process (the same checkpoint store_writer would write).
CheckpointId write_here(Store& store, std::uint64_t seed, std::uint32_t kib,
                        const std::filesystem::path& scratch, std::optional<CheckpointId> parent) {
  Content c = content_for(seed, kib);
  std::filesystem::create_directories(scratch);
  auto w = store.begin_checkpoint(
      {{"seed", std::to_string(seed)}, {"size_kib", std::to_string(kib)}}, parent);
  REQUIRE(w);
  for (const auto& [address, bytes] : c.regions) REQUIRE((*w)->add_region(address, bytes, 0, true));
  for (const auto& [name, bytes] : c.files) {
    auto path = scratch / (std::to_string(seed) + "-" + name);
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    REQUIRE((*w)->add_file(name, 0600, path));
  }
  for (const auto& [name, bytes] : c.blobs) REQUIRE((*w)->add_blob(name, bytes));
  auto r = (*w)->commit({});
  REQUIRE(r);
  return r->id;
}

}  // namespace

TEST_CASE("gc in a loop beside a writer thread never loses a committed chunk", "[gc_race]") {
  ScratchDir dir;
  auto root = dir.path() / "store";
  StoreOptions o;
  o.root = root;
  o.chunk_bytes = kBlock;
  auto store = Store::open(o, true);
  REQUIRE(store);
  std::atomic<bool> done{false};
  std::atomic<int> gcs{0};
  std::string gc_error;
  std::thread collector([&] {
    while (!done) {
      auto g = (*store)->gc();
      if (!g) {
        gc_error = g.error().message;
        return;
      }
      ++gcs;
    }
  });
  // Each checkpoint's parent is the previous one; older ones are removed as we go, so gc finds
  // dead and half-dead packs while the next checkpoint dedups against them.
  std::vector<CheckpointId> ids;
  std::optional<CheckpointId> parent;
  for (int i = 0; i < 12; ++i) {
    CheckpointId id = write_here(**store, 50 + i, 1024, dir.path() / "scratch", parent);
    ids.push_back(id);
    parent = id;
    if (ids.size() >= 3) REQUIRE((*store)->remove(ids[ids.size() - 3]));
  }
  done = true;
  collector.join();
  CHECK(gc_error.empty());
  WARN(gcs.load() << " gc runs beside 12 checkpoints");
  CHECK(check_store(root) == 2);
  check_clean_after_gc(root);
  CHECK(check_store(root) == 2);
}

TEST_CASE("gc in a loop beside writer processes never loses a committed chunk", "[gc_race]") {
  ScratchDir dir;
  auto root = dir.path() / "store";
  REQUIRE(run_writer({"write", root, "1", "512", dir.path() / "s0"}).code == 0);
  std::atomic<bool> done{false};
  std::atomic<int> gcs{0};
  std::thread collector([&] {
    auto store = open_fresh(root);
    while (!done) {
      auto g = store->gc();
      if (g) ++gcs;
    }
  });
  // Two writer processes at once, several rounds; each round removes the previous round's.
  std::vector<std::string> previous;
  for (int round = 0; round < 4; ++round) {
    std::vector<std::thread> writers;
    std::vector<ChildResult> results(2);
    for (int k = 0; k < 2; ++k) {
      writers.emplace_back([&, k] {
        results[k] = run_writer({"write", root, std::to_string(10 * round + k), "768",
                                 dir.path() / ("s" + std::to_string(k + 1))});
      });
    }
    for (auto& t : writers) t.join();
    auto store = open_fresh(root);
    for (const auto& id : previous) REQUIRE(store->remove(*Id128::from_hex(id)));
    previous.clear();
    for (const auto& r : results) {
      REQUIRE(r.code == 0);
      previous.push_back(r.out.substr(0, 32));
    }
  }
  done = true;
  collector.join();
  WARN(gcs.load() << " gc runs beside 8 writer processes");
  CHECK(check_store(root) == 3);
  check_clean_after_gc(root);
}
