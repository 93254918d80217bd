// Store layout and names: where the store lives, which names are tags, and that no name can reach
// outside the store.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <fstream>

#include "gcr/settings.h"
#include "store/layout.h"
#include "test_util.h"

using namespace gcr;
using namespace gcr::store;

TEST_CASE("the default store is GCR_STORE, then /var/lib for root, then XDG, then ~/.local",
          "[layout]") {
  CHECK(default_root_from("/s", "/x", "/home/u", 1000) == "/s");
  CHECK(default_root_from("/s", nullptr, nullptr, 0) == "/s");
  CHECK(default_root_from(nullptr, "/x", "/home/u", 0) == "/var/lib/gcr/store");
  CHECK(default_root_from("", "/x", "/home/u", 1000) == "/x/gcr/store");
  CHECK(default_root_from(nullptr, nullptr, "/home/u", 1000) == "/home/u/.local/share/gcr/store");
  CHECK(default_root_from(nullptr, "relative", "/home/u", 1000) ==
        "/home/u/.local/share/gcr/store");
  // GCR_STORE is read once per program (gcr/settings.h): a parse of a stand-in environment.
  Settings s = parse_settings(
      [](const char* n) { return std::string_view(n) == "GCR_STORE" ? "/tmp/from-env" : nullptr; },
      nullptr);
  CHECK(Store::default_root(s) == "/tmp/from-env");
}

TEST_CASE("hostile names are never tags", "[layout][hostile]") {
  CHECK(valid_tag("job-7"));
  CHECK(valid_tag("a"));
  CHECK(valid_tag("A.b_c-9"));
  CHECK(valid_tag(std::string(128, 'x')));
  for (const std::string& bad : std::vector<std::string>{
           "../x", "a/b", "", ".", "..", ".hidden", "-x", "a b", "a\\b", std::string(129, 'x'),
           std::string(200, 'x'), std::string("a\0b", 3), std::string("\0", 1), "x\n"}) {
    CHECK_FALSE(valid_tag(bad));
    Layout l{"/store"};
    auto p = l.tag(bad);
    REQUIRE_FALSE(p);
    CHECK(p.error().code == Errc::invalid_argument);
  }
}

TEST_CASE("id file names are exactly 32 lowercase hex digits and the extension", "[layout]") {
  Id128 id = Id128::random();
  CHECK(id_from_file_name(id.hex() + ".pack", "pack") == id);
  CHECK_FALSE(id_from_file_name(id.hex() + ".pack", "idx"));
  std::string upper = id.hex();
  for (char& c : upper) c = static_cast<char>(std::toupper(c));
  CHECK_FALSE(id_from_file_name(upper + ".pack", "pack"));
  CHECK_FALSE(id_from_file_name(id.hex() + ".pack.tmp", "pack"));
}

TEST_CASE("a new store is private: directories 0700, files 0600", "[layout]") {
  ScratchDir dir;
  auto root = dir.path() / "deep" / "store";
  auto store = test::open_store(root);
  auto w = store->begin_checkpoint({}, std::nullopt);
  REQUIRE(w);
  auto data = test::random_bytes(10000, 1);
  REQUIRE((*w)->add_region(0x1000, data, 0, true));
  REQUIRE((*w)->commit("t1"));
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path() / "deep")) {
    struct stat st {};
    REQUIRE(::stat(e.path().c_str(), &st) == 0);
    if (S_ISDIR(st.st_mode)) {
      CHECK((st.st_mode & 0777) == 0700);
    } else {
      INFO(e.path());
      CHECK((st.st_mode & 0777) == 0600);
    }
  }
}

TEST_CASE("a directory that is not a store is refused, as is a newer store format", "[layout]") {
  ScratchDir dir;
  std::ofstream(dir.path() / "precious.txt") << "not a store";
  auto r = Store::open({.root = dir.path()}, true);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::invalid_argument);
  CHECK(std::filesystem::exists(dir.path() / "precious.txt"));

  auto missing = Store::open({.root = dir.path() / "nothing"}, false);
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code == Errc::not_found);

  auto root = dir.path() / "s";
  test::open_store(root);
  std::ofstream(root / "STORE", std::ios::trunc) << "gcr-store 2\n";
  auto newer = Store::open({.root = root}, false);
  REQUIRE_FALSE(newer);
  CHECK(newer.error().code == Errc::unsupported);
  CHECK_THAT(newer.error().message, Catch::Contains("2") && Catch::Contains("1"));
}
