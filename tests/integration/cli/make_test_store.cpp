// cli_make_test_store STORE: builds a small image store through the public store API for the gcr
// CLI test (cli_test.sh), with every dedup level present:
//
//   job-1   pid 1234; regions: 4 MiB random at 0x7f0000000000, 2 MiB of zeros at 0x7f0000800000,
//           1 MiB at 0x7f0001000000 equal to job-1's first MiB (within-checkpoint dedup); CRIU
//           files pages-1.img (320 KiB) and core-1234.img; a blob.
//   job-2   parent job-1, same process: the random region with its second MiB changed, the zero
//           region taken from the parent (add_region_from_parent), the same files.
//   other   pid 999, no parent: 3 MiB of its own random data, then job-1's first MiB again.
//
// Prints each tag and id, one per line. Exits 1 with the store's message on any failure.

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "gcr/store.h"

namespace fs = std::filesystem;
using namespace gcr::store;

namespace {

[[noreturn]] void die(const std::string& what, const gcr::Error& e) {
  std::fprintf(stderr, "cli_make_test_store: %s: %s\n", what.c_str(), e.message.c_str());
  std::exit(1);
}

template <typename T>
T must(gcr::Result<T> r, const std::string& what) {
  if (!r) die(what, r.error());
  return std::move(r).value();
}
void must(gcr::Status s, const std::string& what) {
  if (!s) die(what, s.error());
}

std::vector<std::byte> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; i += 8) {
    std::uint64_t x = rng();
    std::memcpy(v.data() + i, &x, std::min<std::size_t>(8, n - i));
  }
  return v;
}

void write_file(const fs::path& path, std::span<const std::byte> data) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  if (!f) {
    std::fprintf(stderr, "cli_make_test_store: cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

// The cmdline meta value: arguments separated by NUL.
std::string cmdline(std::initializer_list<const char*> args) {
  std::string s;
  for (const char* a : args) {
    if (!s.empty()) s += '\0';
    s += a;
  }
  return s;
}

std::string now_ns(int offset_s) {
  auto t = std::chrono::system_clock::now().time_since_epoch() + std::chrono::seconds(offset_s);
  return std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(t).count());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: cli_make_test_store STORE\n");
    return 2;
  }
  fs::path root = argv[1];
  StoreOptions options;
  options.root = root;
  auto store = must(Store::open(options, /*create=*/true), "open");

  constexpr std::size_t kMiB = 1 << 20;
  constexpr std::uint64_t kRandomAt = 0x7f0000000000, kZeroAt = 0x7f0000800000,
                          kCopyAt = 0x7f0001000000;
  std::vector<std::byte> random = random_bytes(4 * kMiB, 1);
  std::vector<std::byte> zeros(2 * kMiB);
  fs::path files = root.parent_path() / "criu-files";
  fs::create_directories(files);
  write_file(files / "pages-1.img", random_bytes(320 * 1024, 2));
  write_file(files / "core-1234.img", random_bytes(3000, 3));
  std::vector<std::byte> blob = random_bytes(100, 4);

  // job-1
  auto w1 =
      must(store->begin_checkpoint({{"name", "job-1"},
                                    {"pid", "1234"},
                                    {"cmdline", cmdline({"python3", "train.py", "--epochs", "3"})},
                                    {"host", "testhost"},
                                    {"kind", "test"},
                                    {"created_unix_ns", now_ns(-120)}},
                                   std::nullopt),
           "begin job-1");
  must(w1->add_region(kRandomAt, random, 0, true), "job-1 random region");
  must(w1->add_region(kZeroAt, zeros, 0, true), "job-1 zero region");
  must(w1->add_region(kCopyAt, std::span(random).first(kMiB), 1, true), "job-1 copy region");
  must(w1->add_file("pages-1.img", 0600, files / "pages-1.img"), "job-1 pages");
  must(w1->add_file("core-1234.img", 0644, files / "core-1234.img"), "job-1 core");
  must(w1->add_blob("gpu-control", blob), "job-1 blob");
  CommitInfo c1 = must(w1->commit("job-1"), "commit job-1");
  std::printf("job-1 %s\n", c1.id.hex().c_str());

  // job-2: a step later, the second MiB of the random region changed.
  std::vector<std::byte> random2 = random;
  auto changed = random_bytes(kMiB, 5);
  std::memcpy(random2.data() + kMiB, changed.data(), kMiB);
  auto w2 =
      must(store->begin_checkpoint({{"name", "job-2"},
                                    {"pid", "1234"},
                                    {"cmdline", cmdline({"python3", "train.py", "--epochs", "3"})},
                                    {"host", "testhost"},
                                    {"kind", "test"},
                                    {"created_unix_ns", now_ns(-60)}},
                                   c1.id),
           "begin job-2");
  must(w2->add_region(kRandomAt, random2, 0, true), "job-2 random region");
  must(w2->add_region_from_parent(kZeroAt, zeros.size(), 0), "job-2 zero region from parent");
  must(w2->add_region(kCopyAt, std::span(random).first(kMiB), 1, false), "job-2 copy region");
  must(w2->add_file("pages-1.img", 0600, files / "pages-1.img"), "job-2 pages");
  must(w2->add_file("core-1234.img", 0644, files / "core-1234.img"), "job-2 core");
  must(w2->add_blob("gpu-control", blob), "job-2 blob");
  CommitInfo c2 = must(w2->commit("job-2"), "commit job-2");
  std::printf("job-2 %s\n", c2.id.hex().c_str());

  // other: another process, sharing one MiB with job-1.
  std::vector<std::byte> mine = random_bytes(4 * kMiB, 6);
  std::memcpy(mine.data() + 3 * kMiB, random.data(), kMiB);
  auto w3 = must(store->begin_checkpoint({{"name", "other"},
                                          {"pid", "999"},
                                          {"cmdline", cmdline({"serve", "--port", "8080"})},
                                          {"kind", "test"},
                                          {"created_unix_ns", now_ns(0)}},
                                         std::nullopt),
                 "begin other");
  must(w3->add_region(kRandomAt, mine, 0, true), "other region");
  CommitInfo c3 = must(w3->commit("other"), "commit other");
  std::printf("other %s\n", c3.id.hex().c_str());
  return 0;
}
