// io::open_private_dir and friends (gcr/private_dir.h, Note [Private directories]). The cases
// that need another owner run only as root (chown); the rest everywhere.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "gcr/private_dir.h"
#include "scratch_dir.h"

namespace fs = std::filesystem;
using namespace gcr;

namespace {

// A scratch directory others may search but not list (0711).
struct SearchableDir : ScratchDir {
  SearchableDir() { ::chmod(path().c_str(), 0711); }
};

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  ::lstat(p.c_str(), &st);
  return st.st_mode & 07777;
}

}  // namespace

TEST_CASE("a missing private directory is made 0700, parents too") {
  SearchableDir t;
  auto fd = io::open_private_dir(t / "a/b", true);
  REQUIRE(fd);
  CHECK(mode_of(t / "a") == 0700);
  CHECK(mode_of(t / "a/b") == 0700);
}

TEST_CASE("an existing directory of ours readable by others is narrowed to 0700") {
  SearchableDir t;
  fs::create_directory(t / "d");
  ::chmod((t / "d").c_str(), 0755);
  REQUIRE(io::open_private_dir(t / "d", false));
  CHECK(mode_of(t / "d") == 0700);
}

TEST_CASE("a directory writable by others is refused, not fixed") {
  SearchableDir t;
  fs::create_directory(t / "d");
  ::chmod((t / "d").c_str(), 0777);
  auto fd = io::open_private_dir(t / "d", true);
  REQUIRE(!fd);
  CHECK(fd.error().code == Errc::permission_denied);
  CHECK(fd.error().message.find("writable by other users") != std::string::npos);
  CHECK(mode_of(t / "d") == 0777);
}

TEST_CASE("a symlink of our own is followed, to a directory that is checked in turn") {
  SearchableDir t;
  fs::create_directory(t / "real");
  fs::create_directory_symlink(t / "real", t / "link");
  CHECK(io::open_private_dir(t / "link", false));
  ::chmod((t / "real").c_str(), 0777);
  CHECK(!io::open_private_dir(t / "link", false));
}

TEST_CASE("a symlink another user planted is refused, even to a directory of ours") {
  if (geteuid() != 0) return;  // needs lchown
  SearchableDir t;
  fs::create_directory(t / "etc-like");
  ::chmod((t / "etc-like").c_str(), 0755);
  fs::create_directory(t / "tmp");
  ::chmod((t / "tmp").c_str(), 01777);
  fs::create_directory_symlink(t / "etc-like", t / "tmp/gcr-0");
  REQUIRE(::lchown((t / "tmp/gcr-0").c_str(), 65534, 65534) == 0);
  auto fd = io::open_private_dir(t / "tmp/gcr-0", true);
  REQUIRE(!fd);
  CHECK(fd.error().message.find("symlink of uid 65534") != std::string::npos);
  CHECK(mode_of(t / "etc-like") == 0755);  // not narrowed through the link
}

TEST_CASE("a directory another user made first is refused, with its owner named") {
  if (geteuid() != 0) return;  // needs chown
  SearchableDir t;
  fs::create_directory(t / "squat");
  REQUIRE(::chown((t / "squat").c_str(), 65534, 65534) == 0);
  auto fd = io::open_private_dir(t / "squat", true);
  REQUIRE(!fd);
  CHECK(fd.error().message.find("belongs to uid 65534") != std::string::npos);
}

TEST_CASE("a parent another user can write, not sticky, is refused; a sticky one is passed") {
  SearchableDir t;
  fs::create_directory(t / "open");
  ::chmod((t / "open").c_str(), 0777);
  CHECK(!io::open_private_dir(t / "open/mine", true));
  ::chmod((t / "open").c_str(), 01777);
  CHECK(io::open_private_dir(t / "open/mine", true));
}

TEST_CASE("open_private_file refuses a symlink and another user's file") {
  SearchableDir t;
  auto dir = io::open_private_dir(t / "d", true);
  REQUIRE(dir);
  fs::create_symlink(t / "victim", t / "d/log");
  auto f = io::open_private_file(dir->get(), "log", O_WRONLY | O_CREAT | O_APPEND);
  CHECK(!f);
  CHECK(!fs::exists(t / "victim"));
  auto g = io::open_private_file(dir->get(), "real.log", O_WRONLY | O_CREAT | O_APPEND);
  CHECK(g);
}

TEST_CASE("check_trusted_parent refuses a socket directory others can write") {
  SearchableDir t;
  fs::create_directory(t / "s");
  ::chmod((t / "s").c_str(), 01777);
  CHECK(!io::check_trusted_parent(t / "s/gcrd.sock", geteuid()));
  ::chmod((t / "s").c_str(), 0700);
  CHECK(io::check_trusted_parent(t / "s/gcrd.sock", geteuid()));
}
