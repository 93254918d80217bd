// A full disk: on a 4 MiB tmpfs, a checkpoint that does not fit fails with Errc::no_space, an
// error naming the path and what to do; earlier checkpoints stay intact and nothing half-written
// is visible. Needs root (mount); skipped with a message otherwise.
#include <sys/mount.h>

#include <random>

#include "itest_util.h"

using namespace gcr;
using namespace gcr::store;
using namespace gcr::store::itest;

namespace {

class TmpfsMount {
 public:
  TmpfsMount(const std::filesystem::path& at, const char* size) : at_(at) {
    std::filesystem::create_directories(at);
    mounted_ = ::mount("tmpfs", at.c_str(), "tmpfs", 0, (std::string("size=") + size).c_str()) == 0;
    if (!mounted_) error_ = std::strerror(errno);
  }
  ~TmpfsMount() {
    if (mounted_) ::umount2(at_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }

 private:
  std::filesystem::path at_;
  bool mounted_ = false;
  std::string error_;
};

Result<CommitInfo> write_random(Store& store, std::size_t bytes, std::uint64_t seed) {
  auto w = store.begin_checkpoint({{"seed", std::to_string(seed)}}, std::nullopt);
  if (!w) return std::move(w).error();
  std::vector<std::byte> data(bytes);
  fill_random(data.data(), data.size(), seed);
  GCR_TRY((*w)->add_region(0x1000, data, 0, true));
  return (*w)->commit({});
}

void check_nothing_half_visible(const std::filesystem::path& root) {
  CHECK(std::filesystem::is_empty(root / "tmp"));
  for (const auto& e : std::filesystem::directory_iterator(root / "packs")) {
    if (e.path().extension() == ".pack") {
      auto idx = e.path();
      idx.replace_extension(".idx");
      CHECK(std::filesystem::exists(idx));  // no unsealed pack left by a failed writer
    }
  }
}

}  // namespace

TEST_CASE("a full disk gives a clear error and leaves no half checkpoint", "[disk_full]") {
  ScratchDir dir;
  auto mnt = dir.path() / "tiny";
  TmpfsMount tmpfs(mnt, "4m");
  if (!tmpfs.mounted()) {
    WARN("skipped: cannot mount a 4 MiB tmpfs at " << mnt << " (" << tmpfs.error()
                                                   << "); this test needs root");
    return;
  }
  auto root = mnt / "store";
  StoreOptions o;
  o.root = root;
  o.chunk_bytes = 256 * 1024;
  auto store = Store::open(o, true);
  REQUIRE(store);
  std::vector<std::vector<std::byte>> kept;
  auto first = write_random(**store, 1 << 20, 1);
  REQUIRE(first);

  auto big = write_random(**store, 6 << 20, 2);
  REQUIRE_FALSE(big);
  CHECK(big.error().code == Errc::no_space);
  CHECK_THAT(big.error().message, Catch::Contains(root.string()) && Catch::Contains("gcr gc") &&
                                      Catch::Contains("full"));
  CHECK((*store)->list()->size() == 1);
  check_nothing_half_visible(root);

  // Fill up with checkpoints of random sizes, so that the disk runs out at every step of a
  // commit (pack, index, manifest), and check after each failure.
  std::mt19937_64 rng(3);
  int failures = 0;
  std::size_t committed = 1;
  for (int i = 0; i < 40 && failures < 8; ++i) {
    auto r = write_random(**store, 4096 + rng() % (700 * 1024), 10 + i);
    if (r) {
      ++committed;
      continue;
    }
    ++failures;
    INFO(r.error().message);
    CHECK(r.error().code == Errc::no_space);
    CHECK((*store)->list()->size() == committed);
    check_nothing_half_visible(root);
  }
  CHECK(failures > 0);
  auto v = (*store)->verify(std::nullopt);
  REQUIRE(v);
  CHECK(v->problems.empty());
  CHECK(v->checkpoints == committed);
  // Every committed checkpoint reads back.
  auto list = (*store)->list();
  REQUIRE(list);
  for (const auto& info : *list) {
    auto r = (*store)->open_checkpoint(info.id);
    INFO((r ? "" : r.error().message));
    REQUIRE(r);
    std::vector<std::byte> want((*r)->manifest().objects[0].size);
    fill_random(want.data(), want.size(), std::stoull(info.meta.at("seed")));
    std::vector<std::byte> got(want.size());
    REQUIRE((*r)->read((*r)->manifest().objects[0], 0, got));
    CHECK(got == want);
  }
  REQUIRE((*store)->gc());
}
