// gc, verify and rm of a store through its Backend (gcr/bucket_gc.h, bucket_verify.h,
// store_backend_list.h), as they run on a bucket, here on a local directory opened as a Backend
// (the same objects; a bucket is tests/integration/s3's): marks before deletion, the grace period,
// a writer that skips marked packs, and a writer whose packs gc takes between its dedup and its
// commit (Note [Bucket gc and writers]).
#include <fcntl.h>
#include <sys/stat.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "gcr/bucket_gc.h"
#include "gcr/bucket_usage.h"
#include "gcr/bucket_verify.h"
#include "gcr/store_backend.h"
#include "gcr/store_backend_list.h"
#include "gcr/store_transfer.h"
#include "test_util.h"

using namespace gcr;
using namespace gcr::store;
namespace fs = std::filesystem;

namespace {

CheckpointId commit_regions(Store& store, std::vector<std::uint64_t> seeds,
                            std::optional<std::string> tag = {}) {
  auto w = store.begin_checkpoint({{"pid", "7"}}, std::nullopt);
  REQUIRE(w);
  std::uint64_t address = 0x10000;
  for (auto seed : seeds) {
    REQUIRE((*w)->add_region(address, test::random_bytes(1 << 20, seed), 0, true));
    address += 16 << 20;
  }
  auto c = (*w)->commit(tag);
  REQUIRE(c);
  return c->id;
}

// Makes every object under root/packs look written `seconds` ago.
void age_packs(const fs::path& root, int seconds) {
  for (const auto& e : fs::directory_iterator(root / "packs")) {
    struct timespec t[2];
    t[0].tv_sec = t[1].tv_sec = ::time(nullptr) - seconds;
    t[0].tv_nsec = t[1].tv_nsec = 0;
    REQUIRE(::utimensat(AT_FDCWD, e.path().c_str(), t, 0) == 0);
  }
}

std::size_t count_with(const fs::path& dir, const std::string& suffix) {
  std::size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().extension() == suffix;
  return n;
}

// A "bucket": a store filled by copying checkpoints from a local store, as push does.
struct Bucket {
  ScratchDir dir;
  std::shared_ptr<Store> local = test::open_store(dir.path() / "local");
  std::unique_ptr<Backend> from = nullptr;
  std::unique_ptr<Backend> to = nullptr;
  fs::path root = dir.path() / "bucket";

  void open() {
    from = test::dir_backend(dir.path() / "local");
    to = test::dir_backend(root);
  }
  TransferReport push(const CheckpointId& id, std::optional<std::string> tag = {}) {
    TransferOptions o;
    o.tag = std::move(tag);
    auto r = copy_checkpoint(*from, *to, id, o);
    REQUIRE(r);
    return *r;
  }
  BucketGcReport gc(std::int64_t grace) {
    BucketGcOptions o;
    o.grace_seconds = grace;
    auto r = collect_bucket_garbage(*to, o);
    REQUIRE(r);
    return *r;
  }
  VerifyReport verify() {
    auto r = verify_backend(*to, std::nullopt, {});
    REQUIRE(r);
    return *r;
  }
};

// A Backend that runs `before` once, on the n-th listing of packs/ (a writer's commit check).
class RacingBackend final : public Backend {
 public:
  RacingBackend(Backend& inner, int n, std::function<void()> before)
      : inner_(inner), n_(n), before_(std::move(before)) {}
  const std::string& name() const override { return inner_.name(); }
  Result<std::vector<std::string>> list(const std::string& dir) override {
    if (dir == "packs" && ++lists_ == n_) before_();
    return inner_.list(dir);
  }
  Result<DirListing> list_detailed(const std::string& dir) override {
    return inner_.list_detailed(dir);
  }
  Result<std::vector<std::byte>> get(const std::string& key, std::uint64_t max) override {
    return inner_.get(key, max);
  }
  Status get_range(const std::string& key, std::uint64_t offset,
                   std::span<std::byte> out) override {
    return inner_.get_range(key, offset, out);
  }
  Status put(const std::string& key, std::span<const std::byte> bytes, PutMode mode) override {
    return inner_.put(key, bytes, mode);
  }
  Result<Versioned> get_versioned(const std::string& key, std::uint64_t max) override {
    return inner_.get_versioned(key, max);
  }
  Status put_if(const std::string& key, std::span<const std::byte> bytes,
                const std::string& version) override {
    return inner_.put_if(key, bytes, version);
  }
  Status remove(const std::string& key) override { return inner_.remove(key); }
  unsigned parallelism() const override { return inner_.parallelism(); }

 private:
  Backend& inner_;
  int n_;
  int lists_ = 0;
  std::function<void()> before_;
};

}  // namespace

TEST_CASE("bucket gc marks unused packs first and deletes them a grace period later", "[bucket]") {
  Bucket b;
  CheckpointId keep = commit_regions(*b.local, {1, 2}, "keep");
  CheckpointId drop = commit_regions(*b.local, {3, 4}, "drop");
  b.open();
  b.push(keep, "keep");
  b.push(drop, "drop");
  std::size_t packs_before = count_with(b.root / "packs", ".pack");

  auto removed = remove_backend_checkpoint(*b.to, drop);
  REQUIRE(removed);
  CHECK(*removed == std::vector<std::string>{"drop"});
  CHECK(!resolve_checkpoint(*b.to, "drop"));

  auto usage = backend_usage(*b.to, std::nullopt);
  REQUIRE(usage);
  CHECK(usage->usage.checkpoints == 1);
  CHECK(usage->usage.garbage_bytes > 0);
  CHECK(usage->marked_bytes == 0);

  // Young: nothing marked, nothing deleted.
  auto young = b.gc(3600);
  CHECK(young.packs_marked == 0);
  CHECK(young.packs_deleted == 0);
  CHECK(young.packs_waiting == 1);
  CHECK(count_with(b.root / "packs", ".dead") == 0);

  // Old enough: marked, not deleted.
  age_packs(b.root, 7200);
  auto marked = b.gc(3600);
  CHECK(marked.packs_marked == 1);
  CHECK(marked.packs_deleted == 0);
  CHECK(count_with(b.root / "packs", ".dead") == 1);
  CHECK(count_with(b.root / "packs", ".pack") == packs_before);
  auto again = b.gc(3600);  // the mark is young
  CHECK(again.packs_deleted == 0);
  CHECK(again.packs_marked == 0);

  // The mark old enough: the pack, its index and the mark go; the kept checkpoint is whole.
  age_packs(b.root, 7200);
  auto swept = b.gc(3600);
  CHECK(swept.packs_deleted == 1);
  CHECK(swept.bytes_freed > 0);
  CHECK(count_with(b.root / "packs", ".dead") == 0);
  CHECK(count_with(b.root / "packs", ".pack") == packs_before - 1);
  CHECK(count_with(b.root / "packs", ".idx") == packs_before - 1);
  auto v = b.verify();
  CHECK(v.problems.empty());
  CHECK(v.checkpoints == 1);
  auto after = backend_usage(*b.to, std::nullopt);
  REQUIRE(after);
  CHECK(after->usage.garbage_bytes == 0);
  CHECK(after->usage.stored_bytes == usage->usage.stored_bytes);
}

TEST_CASE("a dry run changes nothing; grace 0 marks and deletes in one run", "[bucket]") {
  Bucket b;
  CheckpointId one = commit_regions(*b.local, {5}, "one");
  b.open();
  b.push(one, "one");
  REQUIRE(remove_backend_checkpoint(*b.to, one));
  BucketGcOptions dry;
  dry.grace_seconds = 0;
  dry.dry_run = true;
  auto r = collect_bucket_garbage(*b.to, dry);
  REQUIRE(r);
  CHECK(r->packs_marked == 1);
  CHECK(count_with(b.root / "packs", ".dead") == 0);
  auto now = b.gc(0);
  CHECK(now.packs_deleted == 1);
  CHECK(now.passes == 2);
  CHECK(count_with(b.root / "packs", ".pack") == 0);
}

TEST_CASE("a marked pack that a checkpoint names again is unmarked", "[bucket]") {
  Bucket b;
  CheckpointId one = commit_regions(*b.local, {6}, "one");
  b.open();
  b.push(one, "one");
  // A writer that checked its packs just before gc marked them (bucket_gc.h): the mark lands on a
  // pack a committed checkpoint names.
  for (const auto& e : fs::directory_iterator(b.root / "packs")) {
    if (e.path().extension() == ".pack") {
      std::ofstream(b.root / "packs" / (e.path().stem().string() + ".dead"));
    }
  }
  age_packs(b.root, 7200);
  auto r = b.gc(3600);
  CHECK(r.packs_unmarked == 1);
  CHECK(r.packs_deleted == 0);
  CHECK(count_with(b.root / "packs", ".dead") == 0);
  CHECK(b.verify().problems.empty());
}

TEST_CASE("a writer does not count on chunks in marked packs", "[bucket]") {
  Bucket b;
  CheckpointId one = commit_regions(*b.local, {7, 8}, "one");
  b.open();
  auto first = b.push(one, "one");
  REQUIRE(remove_backend_checkpoint(*b.to, one));
  age_packs(b.root, 7200);
  REQUIRE(b.gc(3600).packs_marked == 1);
  // Pushed again: the chunks are there, but in a marked pack that may go at any time.
  auto second = b.push(one, "one");
  CHECK(second.present_bytes == 0);
  CHECK(second.copied_bytes == first.copied_bytes);
  age_packs(b.root, 7200);
  CHECK(b.gc(3600).packs_deleted == 1);
  CHECK(b.verify().problems.empty());
  CHECK(resolve_checkpoint(*b.to, "one").value() == one);
}

TEST_CASE("gc taking a writer's packs between its dedup and its commit loses nothing", "[bucket]") {
  Bucket b;
  CheckpointId base = commit_regions(*b.local, {9, 10}, "base");
  CheckpointId next = commit_regions(*b.local, {9, 11}, "next");  // region 9 shared
  b.open();
  b.push(base, "base");
  REQUIRE(remove_backend_checkpoint(*b.to, base));
  // The writer lists packs/ twice: for its dedup (it finds region 9), then to check before its
  // commit. In between, gc (grace 0: it does not wait for anyone) deletes every unused pack: the
  // old one holding region 9, and the one the writer just wrote.
  std::uint64_t deleted = 0;
  RacingBackend racing(*b.to, 2, [&] {
    BucketGcOptions o;
    o.grace_seconds = 0;
    auto r = collect_bucket_garbage(*b.to, o);
    REQUIRE(r);
    deleted = r->packs_deleted;
  });
  TransferOptions o;
  o.tag = "next";
  auto r = copy_checkpoint(*b.from, racing, next, o);
  REQUIRE(r);
  CHECK(deleted == 2);
  CHECK(r->present_bytes == 0);  // what it had found went, and was copied again
  auto v = b.verify();
  CHECK(v.problems.empty());
  CHECK(v.checkpoints == 1);
  CHECK(v.bytes == 2u << 20);
}

TEST_CASE("verify of a Backend store finds a damaged record and a lost pack", "[bucket]") {
  Bucket b;
  CheckpointId one = commit_regions(*b.local, {12}, "one");
  CheckpointId two = commit_regions(*b.local, {13}, "two");
  b.open();
  b.push(one, "one");
  b.push(two, "two");
  CHECK(b.verify().problems.empty());
  auto report_one = verify_backend(*b.to, one, {});
  REQUIRE(report_one);
  CHECK(report_one->checkpoints == 1);

  std::vector<fs::path> packs;
  for (const auto& e : fs::directory_iterator(b.root / "packs")) {
    if (e.path().extension() == ".pack") packs.push_back(e.path());
  }
  REQUIRE(packs.size() == 2);
  {
    std::fstream f(packs[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    char c = 0;
    f.read(&c, 1);
    f.seekp(200);
    c = static_cast<char>(c ^ 0x5a);
    f.write(&c, 1);
  }
  fs::remove(packs[1].parent_path() / (packs[1].stem().string() + ".idx"));
  auto v = b.verify();
  REQUIRE(v.problems.size() >= 2);
  bool damaged = false, lost = false;
  for (const auto& p : v.problems) {
    damaged |= p.what.find("checksum") != std::string::npos ||
               p.what.find("record") != std::string::npos ||
               p.what.find("zstd") != std::string::npos;
    lost |= p.what.find("in no sealed pack") != std::string::npos;
  }
  CHECK(damaged);
  CHECK(lost);
}

TEST_CASE("a tag moves by compare-and-swap", "[bucket]") {
  ScratchDir dir;
  auto b = test::dir_backend(dir.path() / "s");
  auto text = [](const char* s) { return test::as_bytes(std::string(s)); };
  REQUIRE(b->put_if("tags/t", text("a\n"), ""));
  CHECK(b->put_if("tags/t", text("b\n"), "").error().code == Errc::busy);  // no longer absent
  auto v = b->get_versioned("tags/t", 64);
  REQUIRE(v);
  REQUIRE(b->put_if("tags/t", text("c\n"), v->version));
  CHECK(b->put_if("tags/t", text("d\n"), v->version).error().code == Errc::busy);  // stale
  auto now = b->get("tags/t", 64);
  REQUIRE(now);
  CHECK(std::string(reinterpret_cast<const char*>(now->data()), now->size()) == "c\n");
}
