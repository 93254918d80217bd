// gcr/trusted_path.h: which paths root may trust, and the environment variables it ignores. The
// cases that need another owner run only as root (chown); the rest everywhere.
#include <catch2/catch.hpp>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gcr/trusted_path.h"
#include "scratch_dir.h"

namespace fs = std::filesystem;
using namespace gcr;

TEST_CASE("the system's programs are root's alone, through root's links too") {
  CHECK(only_root_can_change(fs::canonical("/bin/sh")));
  CHECK(only_root_can_change("/bin/sh"));  // /bin -> usr/bin, sh -> dash: root's links
  CHECK(only_root_can_change("/usr/lib"));
  CHECK(only_root_can_change("/usr/lib/../bin/sh"));
  CHECK_FALSE(only_root_can_change("bin/sh"));
  CHECK_FALSE(only_root_can_change("/tmp"));  // a sticky directory is anyone's to fill
}

TEST_CASE("what another may change is not root's") {
  if (geteuid() != 0) return;  // needs root: a private directory of root's under /tmp
  ScratchDir d;
  fs::path file = d / "criu";
  std::ofstream(file.string()) << "#!/bin/sh\n";
  CHECK(only_root_can_change(file));  // root's 0700 directory in sticky /tmp: others cannot
  CHECK(only_root_can_change(d / "not-yet"));  // only root may make it

  fs::create_symlink(file, d / "link");
  CHECK(only_root_can_change(d / "link"));  // root's link, in root's directory
  fs::create_symlink("/tmp", d / "to-tmp");
  CHECK_FALSE(only_root_can_change(d / "to-tmp" / "anything"));  // leads into /tmp
  REQUIRE(::lchown((d / "link").c_str(), 65534, 65534) == 0);
  CHECK_FALSE(only_root_can_change(d / "link"));  // nobody's link

  REQUIRE(::chown(file.c_str(), 65534, 65534) == 0);  // nobody's
  CHECK_FALSE(only_root_can_change(file));
  REQUIRE(::chown(file.c_str(), 0, 0) == 0);

  ::chmod(file.c_str(), 0646);  // anyone may rewrite it
  CHECK_FALSE(only_root_can_change(file));
  ::chmod(file.c_str(), 0664);  // root's group may: still root's
  CHECK(only_root_can_change(file));

  fs::permissions(d.path(), fs::perms::all);  // anyone may rename it away and put another
  CHECK_FALSE(only_root_can_change(file));
  CHECK_FALSE(only_root_can_change(d / "not-yet"));
  CHECK_FALSE(only_root_can_change(fs::temp_directory_path() / "gcr-trusted-path-test-none"));
  CHECK_FALSE(only_root_can_change(d / "not-yet" / "below"));
}

TEST_CASE("a variable naming what another may change is ignored as root, kept otherwise") {
  ScratchDir d;
  fs::permissions(d.path(), fs::perms::all);
  std::string mine = (d / "criu").string();
  ::setenv("GCR_TRUSTED_PATH_TEST", mine.c_str(), 1);
  if (geteuid() == 0) {
    CHECK_FALSE(env_path_for_root("GCR_TRUSTED_PATH_TEST"));
    ::setenv("GCR_TRUSTED_PATH_TEST", "/bin/sh", 1);
    CHECK(env_path_for_root("GCR_TRUSTED_PATH_TEST") == fs::path("/bin/sh"));
  } else {
    CHECK(env_path_for_root("GCR_TRUSTED_PATH_TEST") == fs::path(mine));
  }
  ::setenv("GCR_TRUSTED_PATH_TEST", "", 1);
  CHECK_FALSE(env_path_for_root("GCR_TRUSTED_PATH_TEST"));
  ::unsetenv("GCR_TRUSTED_PATH_TEST");
}

TEST_CASE("a path from the settings (GCR_CRIU, ...) is taken by the same rule") {
  ScratchDir d;
  fs::permissions(d.path(), fs::perms::all);
  const fs::path mine = d / "criu";
  if (geteuid() == 0) {
    CHECK_FALSE(path_for_root("GCR_TRUSTED_PATH_TEST_2", mine));
    CHECK(path_for_root("GCR_TRUSTED_PATH_TEST_2", fs::path("/bin/sh")) == fs::path("/bin/sh"));
  } else {
    CHECK(path_for_root("GCR_TRUSTED_PATH_TEST_2", mine) == mine);
  }
  CHECK_FALSE(path_for_root("GCR_TRUSTED_PATH_TEST_2", std::nullopt));
  CHECK_FALSE(path_for_root("GCR_TRUSTED_PATH_TEST_2", fs::path()));
}
