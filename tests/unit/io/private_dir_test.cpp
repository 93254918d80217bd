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

namespace fs = std::filesystem;
using namespace gcr;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "gcr-private-dir-test.XXXXXX").string();
    path = mkdtemp(t.data());
    ::chmod(path.c_str(), 0711);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  ::lstat(p.c_str(), &st);
  return st.st_mode & 07777;
}

}  // namespace

TEST_CASE("a missing private directory is made 0700, parents too") {
  TempDir t;
  auto fd = io::open_private_dir(t.path / "a/b", true);
  REQUIRE(fd);
  CHECK(mode_of(t.path / "a") == 0700);
  CHECK(mode_of(t.path / "a/b") == 0700);
}

TEST_CASE("an existing directory of ours readable by others is narrowed to 0700") {
  TempDir t;
  fs::create_directory(t.path / "d");
  ::chmod((t.path / "d").c_str(), 0755);
  REQUIRE(io::open_private_dir(t.path / "d", false));
  CHECK(mode_of(t.path / "d") == 0700);
}

TEST_CASE("a directory writable by others is refused, not fixed") {
  TempDir t;
  fs::create_directory(t.path / "d");
  ::chmod((t.path / "d").c_str(), 0777);
  auto fd = io::open_private_dir(t.path / "d", true);
  REQUIRE(!fd);
  CHECK(fd.error().code == Errc::permission_denied);
  CHECK(fd.error().message.find("writable by other users") != std::string::npos);
  CHECK(mode_of(t.path / "d") == 0777);
}

TEST_CASE("a symlink of our own is followed, to a directory that is checked in turn") {
  TempDir t;
  fs::create_directory(t.path / "real");
  fs::create_directory_symlink(t.path / "real", t.path / "link");
  CHECK(io::open_private_dir(t.path / "link", false));
  ::chmod((t.path / "real").c_str(), 0777);
  CHECK(!io::open_private_dir(t.path / "link", false));
}

TEST_CASE("a symlink another user planted is refused, even to a directory of ours") {
  if (geteuid() != 0) return;  // needs lchown
  TempDir t;
  fs::create_directory(t.path / "etc-like");
  ::chmod((t.path / "etc-like").c_str(), 0755);
  fs::create_directory(t.path / "tmp");
  ::chmod((t.path / "tmp").c_str(), 01777);
  fs::create_directory_symlink(t.path / "etc-like", t.path / "tmp/gcr-0");
  REQUIRE(::lchown((t.path / "tmp/gcr-0").c_str(), 65534, 65534) == 0);
  auto fd = io::open_private_dir(t.path / "tmp/gcr-0", true);
  REQUIRE(!fd);
  CHECK(fd.error().message.find("symlink of uid 65534") != std::string::npos);
  CHECK(mode_of(t.path / "etc-like") == 0755);  // not narrowed through the link
}

TEST_CASE("a directory another user made first is refused, with its owner named") {
  if (geteuid() != 0) return;  // needs chown
  TempDir t;
  fs::create_directory(t.path / "squat");
  REQUIRE(::chown((t.path / "squat").c_str(), 65534, 65534) == 0);
  auto fd = io::open_private_dir(t.path / "squat", true);
  REQUIRE(!fd);
  CHECK(fd.error().message.find("belongs to uid 65534") != std::string::npos);
}

TEST_CASE("a parent another user can write, not sticky, is refused; a sticky one is passed") {
  TempDir t;
  fs::create_directory(t.path / "open");
  ::chmod((t.path / "open").c_str(), 0777);
  CHECK(!io::open_private_dir(t.path / "open/mine", true));
  ::chmod((t.path / "open").c_str(), 01777);
  CHECK(io::open_private_dir(t.path / "open/mine", true));
}

TEST_CASE("open_private_file refuses a symlink and another user's file") {
  TempDir t;
  auto dir = io::open_private_dir(t.path / "d", true);
  REQUIRE(dir);
  fs::create_symlink(t.path / "victim", t.path / "d/log");
  auto f = io::open_private_file(dir->get(), "log", O_WRONLY | O_CREAT | O_APPEND);
  CHECK(!f);
  CHECK(!fs::exists(t.path / "victim"));
  auto g = io::open_private_file(dir->get(), "real.log", O_WRONLY | O_CREAT | O_APPEND);
  CHECK(g);
}

TEST_CASE("check_trusted_parent refuses a socket directory others can write") {
  TempDir t;
  fs::create_directory(t.path / "s");
  ::chmod((t.path / "s").c_str(), 01777);
  CHECK(!io::check_trusted_parent(t.path / "s/gcrd.sock", geteuid()));
  ::chmod((t.path / "s").c_str(), 0700);
  CHECK(io::check_trusted_parent(t.path / "s/gcrd.sock", geteuid()));
}
