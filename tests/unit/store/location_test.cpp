// Store locations (gcr/store_location.h): paths become absolute against the client's directory,
// s3:// URLs are recognised, unknown schemes are refused; and creating a store is safe when many
// writers do it at once.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "gcr/store.h"
#include "gcr/store_location.h"
#include "test_util.h"

using namespace gcr;
using namespace gcr::store;

TEST_CASE("a relative store path is made absolute against the caller's directory", "[location]") {
  auto loc = parse_store_location("st/../store", "/home/u/work");
  REQUIRE(loc);
  CHECK(!loc->is_s3());
  CHECK(loc->directory == "/home/u/work/store");
  CHECK(parse_store_location("/abs/store/", "/x")->directory == "/abs/store");
  CHECK(parse_store_location("file:///abs/store", "/x")->directory == "/abs/store");
  // A path with a colon is still a path: only SCHEME:// is a URL.
  CHECK(parse_store_location("s3:bucket", "/x")->directory == "/x/s3:bucket");
  CHECK_FALSE(parse_store_location("rel", ""));
}

TEST_CASE("s3://BUCKET/PREFIX is a bucket location", "[location]") {
  auto loc = parse_store_location("s3://my-bucket/team/a/", "/x");
  REQUIRE(loc);
  CHECK(loc->is_s3());
  CHECK(loc->bucket == "my-bucket");
  CHECK(loc->prefix == "team/a");
  CHECK(loc->text() == "s3://my-bucket/team/a");
  auto bare = parse_store_location("S3://bkt", "/x");
  REQUIRE(bare);
  CHECK(bare->prefix.empty());
  CHECK(bare->text() == "s3://bkt");
  for (const char* bad : {"s3://", "s3://ab", "s3://Upper", "s3://b_k", "s3://bkt/a//b",
                          "s3://bkt/../x", "s3://bkt/a b", "s3://bkt/x?y"}) {
    auto r = parse_store_location(bad, "/x");
    INFO(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::invalid_argument);
  }
}

TEST_CASE("an unknown URL scheme is an error, not a directory", "[location]") {
  for (const char* url : {"gs://bucket/x", "http://host/store", "file://relative"}) {
    auto r = parse_store_location(url, "/x");
    INFO(url);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::invalid_argument);
    CHECK_THAT(r.error().message, Catch::Contains("s3://"));
  }
}

TEST_CASE("gcr restore s3://BUCKET/PREFIX/NAME splits off the name", "[location]") {
  auto a = split_store_url_and_name("s3://bkt/team/job-7");
  REQUIRE(a);
  CHECK(a->store.text() == "s3://bkt/team");
  CHECK(a->name == "job-7");
  auto b = split_store_url_and_name("s3://bkt/job-7");
  REQUIRE(b);
  CHECK(b->store.text() == "s3://bkt");
  CHECK_FALSE(split_store_url_and_name("s3://bkt"));
  CHECK_FALSE(split_store_url_and_name("job-7"));
}

TEST_CASE("the cache is GCR_CACHE_DIR, then /var/cache for root, then XDG, then ~/.cache",
          "[location]") {
  CHECK(default_cache_dir_from("/c", "/x", "/home/u", 1000) == "/c");
  CHECK(default_cache_dir_from(nullptr, "/x", "/home/u", 0) == "/var/cache/gcr");
  CHECK(default_cache_dir_from(nullptr, "/x", "/home/u", 1000) == "/x/gcr");
  CHECK(default_cache_dir_from(nullptr, "rel", "/home/u", 1000) == "/home/u/.cache/gcr");
}

TEST_CASE("writers creating one new store at once all succeed", "[location][store]") {
  ScratchDir dir;
  for (int round = 0; round < 20; ++round) {
    auto root = dir.path() / ("s" + std::to_string(round));
    // Processes, as two gcrd requests or two `gcr checkpoint`s would be.
    std::vector<pid_t> children;
    for (int i = 0; i < 6; ++i) {
      pid_t pid = ::fork();
      if (pid == 0) {
        StoreOptions o;
        o.root = root;
        auto s = Store::open(o, /*create=*/true);
        if (!s) std::fprintf(stderr, "open: %s\n", s.error().message.c_str());
        ::_exit(s ? 0 : 1);
      }
      children.push_back(pid);
    }
    for (pid_t pid : children) {
      int status = 0;
      REQUIRE(::waitpid(pid, &status, 0) == pid);
      CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
    }
    StoreOptions o;
    o.root = root;
    CHECK(Store::open(o, /*create=*/false));
  }
}
