// Round trips: regions, files and blobs come back bit-exact, whole or in part, and
// materialize_files recreates a CRIU image directory; prefetch reads ahead what it is asked.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gcr/unique_fd.h"
#include "test_util.h"

using namespace gcr;
using namespace gcr::store;

namespace {

const ObjectEntry& find(const Manifest& m, ObjectKind kind, const std::string& name,
                        std::uint64_t address = 0) {
  for (const auto& o : m.objects) {
    if (o.kind == kind && o.name == name && o.address == address) return o;
  }
  throw std::runtime_error("object not found");
}

}  // namespace

TEST_CASE("regions, files and blobs read back bit-exact", "[reader]") {
  ScratchDir dir;
  StoreOptions opts;
  opts.chunk_bytes = 64 * 1024;  // many chunks per region, fast
  auto store = test::open_store(dir.path() / "s", opts);
  auto big = test::random_bytes(3 * 64 * 1024 + 123, 1);
  auto text = test::text_bytes(200000, 2);
  std::vector<std::byte> zeros(300000);
  std::vector<std::byte> empty;
  auto pages = test::random_bytes(2 << 20, 3);
  auto other = test::text_bytes(5000, 4);
  test::write_file(dir.path() / "pages-1.img", pages);
  test::write_file(dir.path() / "core-1.img", other);
  test::write_file(dir.path() / "empty.img", empty);

  auto w = store->begin_checkpoint({{"kind", "test"}}, std::nullopt);
  REQUIRE(w);
  REQUIRE((*w)->add_region(0x7f0000000000, big, 0, true));
  REQUIRE((*w)->add_region(0x7f0000100000, text, 1, false));
  REQUIRE((*w)->add_region(0x7f0000200000, zeros, 0, true));
  REQUIRE((*w)->add_region(0x7f0000300000, empty, 0, true));
  REQUIRE((*w)->add_file("pages-1.img", 0600, dir.path() / "pages-1.img"));
  REQUIRE((*w)->add_file("core-1.img", 0644, dir.path() / "core-1.img"));
  REQUIRE((*w)->add_file("empty.img", 0600, dir.path() / "empty.img"));
  REQUIRE((*w)->add_blob("gcr.state", text));
  auto c = (*w)->commit("rt");
  REQUIRE(c);

  auto r = store->open_checkpoint(c->id);
  REQUIRE(r);
  const Manifest& m = (*r)->manifest();
  CHECK(m.meta.at("kind") == "test");
  CHECK(test::read_object(**r, find(m, ObjectKind::device_region, "", 0x7f0000000000)) == big);
  CHECK(test::read_object(**r, find(m, ObjectKind::device_region, "", 0x7f0000100000)) == text);
  CHECK(test::read_object(**r, find(m, ObjectKind::device_region, "", 0x7f0000200000)) == zeros);
  CHECK(test::read_object(**r, find(m, ObjectKind::device_region, "", 0x7f0000300000)).empty());
  CHECK(test::read_object(**r, find(m, ObjectKind::file, "pages-1.img")) == pages);
  CHECK(test::read_object(**r, find(m, ObjectKind::file, "core-1.img")) == other);
  CHECK(test::read_object(**r, find(m, ObjectKind::blob, "gcr.state")) == text);
  CHECK(find(m, ObjectKind::device_region, "", 0x7f0000100000).device == 1);
  CHECK_FALSE(find(m, ObjectKind::device_region, "", 0x7f0000100000).dirty);

  SECTION("partial reads at odd offsets cross chunk boundaries") {
    const auto& o = find(m, ObjectKind::device_region, "", 0x7f0000000000);
    for (auto [off, len] : {std::pair<std::size_t, std::size_t>{0, 1},
                            {65535, 2},
                            {1000, 150000},
                            {big.size() - 7, 7},
                            {64 * 1024, 64 * 1024}}) {
      std::vector<std::byte> out(len);
      REQUIRE((*r)->read(o, off, out));
      CHECK(std::equal(out.begin(), out.end(), big.begin() + static_cast<std::ptrdiff_t>(off)));
    }
    std::vector<std::byte> out(8);
    CHECK((*r)->read(o, big.size() - 7, out).error().code == Errc::invalid_argument);
  }

  SECTION("materialize_files recreates the image directory with its modes") {
    auto out = dir.path() / "restore" / "images";
    REQUIRE((*r)->materialize_files(out));
    CHECK(test::slurp(out / "pages-1.img") == pages);
    CHECK(test::slurp(out / "core-1.img") == other);
    CHECK(std::filesystem::file_size(out / "empty.img") == 0);
    struct stat st {};
    REQUIRE(::stat((out / "core-1.img").c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0644);
    REQUIRE(::stat(out.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0700);
    CHECK_FALSE(std::filesystem::exists(out / "gcr.state"));  // blobs are not image files
  }
}

TEST_CASE("a file with trailing zero pages materializes to its full size", "[reader]") {
  ScratchDir dir;
  auto store = test::open_store(dir.path() / "s");
  auto data = test::random_bytes(100000, 5);
  data.resize(3 << 20);  // zeros after the data: zero chunks, never written
  test::write_file(dir.path() / "pages-2.img", data);
  auto w = store->begin_checkpoint({}, std::nullopt);
  REQUIRE((*w)->add_file("sub/pages-2.img", 0600, dir.path() / "pages-2.img"));
  auto c = (*w)->commit({});
  REQUIRE(c);
  CHECK(c->stats.at("zero_bytes") > 1u << 20);  // whole zero chunks past the data
  auto r = store->open_checkpoint(c->id);
  REQUIRE(r);
  REQUIRE((*r)->materialize_files(dir.path() / "out"));
  CHECK(test::slurp(dir.path() / "out" / "sub" / "pages-2.img") == data);
}

TEST_CASE("many files materialize in parallel", "[reader]") {
  ScratchDir dir;
  auto store = test::open_store(dir.path() / "s");
  auto w = store->begin_checkpoint({}, std::nullopt);
  std::vector<std::vector<std::byte>> contents;
  for (int i = 0; i < 300; ++i) {
    contents.push_back(test::random_bytes(1000 + 37 * i, 100 + i));
    auto p = dir.path() / ("f" + std::to_string(i));
    test::write_file(p, contents.back());
    REQUIRE((*w)->add_file("img-" + std::to_string(i) + ".img", 0600, p));
  }
  auto c = (*w)->commit({});
  REQUIRE(c);
  auto r = store->open_checkpoint(c->id);
  REQUIRE((*r)->materialize_files(dir.path() / "out"));
  for (int i = 0; i < 300; ++i) {
    CHECK(test::slurp(dir.path() / "out" / ("img-" + std::to_string(i) + ".img")) == contents[i]);
  }
}

TEST_CASE("an object from another checkpoint's manifest is refused", "[reader]") {
  ScratchDir dir;
  auto store = test::open_store(dir.path() / "s");
  auto w = store->begin_checkpoint({}, std::nullopt);
  auto data = test::random_bytes(1000, 1);
  REQUIRE((*w)->add_blob("a", data));
  auto c = (*w)->commit({});
  auto r = store->open_checkpoint(c->id);
  ObjectEntry bogus = (*r)->manifest().objects[0];
  bogus.chunk_count = 5;
  std::vector<std::byte> out(10);
  CHECK((*r)->read(bogus, 0, out).error().code == Errc::invalid_argument);
}

TEST_CASE("a region stored piece by piece has the chunks of one stored at once, and reads back",
          "[store][writer]") {
  ScratchDir dir;
  StoreOptions o;
  o.chunk_bytes = 64 << 10;
  auto store = test::open_store(dir.path() / "s", o);
  // Larger than one streaming piece (64 MiB), not a multiple of the chunk size.
  std::vector<std::byte> data = test::random_bytes((65u << 20) + 12345, 7);
  auto whole = store->begin_checkpoint({}, std::nullopt);
  REQUIRE(whole);
  REQUIRE((*whole)->add_region(0x200000, data, 0, true));
  auto c1 = (*whole)->commit(std::nullopt);
  REQUIRE(c1);
  auto streamed = store->begin_checkpoint({}, std::nullopt);
  REQUIRE(streamed);
  std::uint64_t pieces = 0, next = 0;
  auto fill = [&](std::uint64_t off, std::span<std::byte> out) -> Status {
    CHECK(off == next);  // in order, back to back
    next = off + out.size();
    ++pieces;
    std::memcpy(out.data(), data.data() + off, out.size());
    return ok();
  };
  REQUIRE((*streamed)->add_region_streamed(0x200000, data.size(), 0, true, fill));
  auto c2 = (*streamed)->commit(std::nullopt);
  REQUIRE(c2);
  CHECK(pieces >= 2);
  CHECK(next == data.size());
  auto r1 = store->open_checkpoint(c1->id);
  auto r2 = store->open_checkpoint(c2->id);
  REQUIRE(r1);
  REQUIRE(r2);
  CHECK((*r1)->manifest().chunks.size() == (*r2)->manifest().chunks.size());
  for (std::size_t i = 0; i < (*r1)->manifest().chunks.size(); ++i)
    CHECK((*r1)->manifest().chunks[i].id == (*r2)->manifest().chunks[i].id);
  CHECK(test::read_object(**r2, (*r2)->manifest().objects[0]) == data);
  // A fill that fails leaves nothing committed and says why.
  auto broken = store->begin_checkpoint({}, std::nullopt);
  REQUIRE(broken);
  auto bad = (*broken)->add_region_streamed(0x400000, 4 << 20, 0, true,
                                            [](std::uint64_t, std::span<std::byte>) -> Status {
                                              return make_error(Errc::io_error, "gone");
                                            });
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("gone") != std::string::npos);
}

TEST_CASE("materialize leaves out the ranges it is told to, as holes", "[reader]") {
  ScratchDir dir;
  StoreOptions opts;
  opts.chunk_bytes = 64 * 1024;
  auto store = test::open_store(dir.path() / "s", opts);
  auto pages = test::random_bytes(4 << 20, 7);
  auto core = test::text_bytes(5000, 8);
  test::write_file(dir.path() / "pages-1.img", pages);
  test::write_file(dir.path() / "core-1.img", core);
  auto w = store->begin_checkpoint({}, std::nullopt);
  REQUIRE((*w)->add_file("pages-1.img", 0600, dir.path() / "pages-1.img"));
  REQUIRE((*w)->add_file("core-1.img", 0600, dir.path() / "core-1.img"));
  auto c = (*w)->commit({});
  REQUIRE(c);
  auto r = store->open_checkpoint(c->id);
  REQUIRE(r);
  // The middle two MiB, and a range of core-1.img's name that is not a file.
  CheckpointReader::LeftOut left_out{{"pages-1.img", {{1 << 20, 2 << 20}}},
                                     {"missing.img", {{0, 4096}}}};
  REQUIRE((*r)->materialize_files(dir.path() / "out", left_out));
  auto got = test::slurp(dir.path() / "out" / "pages-1.img");
  REQUIRE(got.size() == pages.size());
  CHECK(test::slurp(dir.path() / "out" / "core-1.img") == core);
  // Chunks wholly inside the range are holes; the bytes outside it are all there (a chunk that
  // straddles an edge is written whole).
  CHECK(std::equal(got.begin(), got.begin() + (1 << 20), pages.begin()));
  CHECK(std::equal(got.begin() + (3 << 20), got.end(), pages.begin() + (3 << 20)));
  std::size_t zero = 0;
  for (std::size_t i = 1 << 20; i < (3u << 20); ++i) zero += got[i] == std::byte{0};
  CHECK(zero > (3u << 19));  // most of the two MiB never written (random data has few zeros)
}

namespace {

// Bytes of `path` in the page cache (mincore), and its size.
std::pair<std::uint64_t, std::uint64_t> resident_bytes(const std::filesystem::path& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  REQUIRE(fd);
  struct stat st {};
  REQUIRE(::fstat(fd.get(), &st) == 0);
  const auto size = static_cast<std::uint64_t>(st.st_size);
  const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd.get(), 0);
  REQUIRE(p != MAP_FAILED);
  std::vector<unsigned char> in((size + page - 1) / page);
  REQUIRE(::mincore(p, size, in.data()) == 0);
  ::munmap(p, size);
  std::uint64_t n = 0;
  for (unsigned char v : in) n += (v & 1) ? page : 0;
  return {n, size};
}

}  // namespace

TEST_CASE("prefetch reads what is asked into the page cache, and reads stay bit-exact",
          "[reader]") {
  ScratchDir dir;
  StoreOptions opts;
  opts.chunk_bytes = 64 * 1024;
  auto store = test::open_store(dir.path() / "s", opts);
  auto big = test::random_bytes(8 << 20, 11);
  auto w = store->begin_checkpoint({{"kind", "test"}}, std::nullopt);
  REQUIRE(w);
  REQUIRE((*w)->add_region(0x7f0000000000, big, 0, true));
  auto c = (*w)->commit("pf");
  REQUIRE(c);
  std::vector<std::filesystem::path> packs;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path() / "s"))
    if (e.path().extension() == ".pack") packs.push_back(e.path());
  REQUIRE(packs.size() == 1);
  // Out of the page cache (its bytes are on disk: the commit synced them).
  {
    UniqueFd fd(::open(packs[0].c_str(), O_RDONLY | O_CLOEXEC));
    REQUIRE(fd);
    REQUIRE(::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED) == 0);
  }
  auto [before, size] = resident_bytes(packs[0]);
  if (before > size / 2) {
    WARN("this filesystem keeps " << packs[0] << " in memory (tmpfs?): nothing to prefetch");
    return;
  }
  auto r = store->open_checkpoint(c->id);
  REQUIRE(r);
  const ObjectEntry& o = find((*r)->manifest(), ObjectKind::device_region, "", 0x7f0000000000);

  (*r)->prefetch(o, o.size, 1 << 20);  // past the end: nothing
  (*r)->prefetch(o, 0, 0);             // nothing
  (*r)->prefetch(o, 2 << 20, 3 << 20);
  std::uint64_t now = 0;
  for (int i = 0; i < 500 && now < before + (3 << 20); ++i) {
    now = resident_bytes(packs[0]).first;
    if (now < before + (3 << 20)) ::usleep(10'000);
  }
  CHECK(now >= before + (3 << 20));  // the 3 MiB asked for (and their records' headers)
  CHECK(now < size - (2 << 20));     // not the whole pack
  CHECK(test::read_object(**r, o) == big);
}
