// criu-plugin/config.cpp: the GCR_* settings each stage reads.
#include "config.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <string>

#include "dump_root.h"

using namespace gcr::criu_plugin;

namespace {
struct CleanEnv {
  CleanEnv() { clear(); }
  ~CleanEnv() { clear(); }
  static void clear() {
    for (const char* v :
         {"GCR_LOCK_TIMEOUT_MS", "GCR_DEVICE_MAP", "GCR_LEAVE_RUNNING", "GCR_REAL_LIBCUDA",
          "GCR_GCRD_SOCKET", "GCR_STORE", "GCR_CRIU_IMAGES", "GCR_PLUGIN_GCRD"})
      unsetenv(v);
    setenv("GCR_CONFIG", "/nonexistent/gcr.conf", 1);  // never the machine's /etc/gcr/gcr.conf
  }
};
}  // namespace

TEST_CASE("defaults: a 10 s lock timeout, no device map, final state not given") {
  CleanEnv env;
  auto dump = load_config(Stage::dump);
  REQUIRE(dump);
  CHECK(dump->lock_timeout_ms == 10000);
  CHECK_FALSE(dump->leave_running);
  auto restore = load_config(Stage::restore);
  REQUIRE(restore);
  CHECK(restore->device_map.empty());
}

TEST_CASE("each stage reads, and refuses malformed, only the settings it uses") {
  CleanEnv env;
  setenv("GCR_LOCK_TIMEOUT_MS", "2500", 1);
  setenv("GCR_LEAVE_RUNNING", "1", 1);
  setenv("GCR_DEVICE_MAP", "0=1", 1);
  auto dump = load_config(Stage::dump);
  REQUIRE(dump);
  CHECK(dump->lock_timeout_ms == 2500);
  CHECK(dump->leave_running == true);
  auto restore = load_config(Stage::restore);
  REQUIRE(restore);
  CHECK(restore->device_map.size() == 1);

  setenv("GCR_DEVICE_MAP", "zero=one", 1);
  CHECK(load_config(Stage::dump));  // a dump does not use the map
  CHECK_FALSE(load_config(Stage::restore));

  for (const char* bad : {"-1", "10s", "", "99999999999999"}) {
    INFO(bad);
    setenv("GCR_LOCK_TIMEOUT_MS", bad, 1);
    if (*bad) CHECK_FALSE(load_config(Stage::dump));
  }
  setenv("GCR_LOCK_TIMEOUT_MS", "0", 1);
  REQUIRE(load_config(Stage::dump));
  CHECK(load_config(Stage::dump)->lock_timeout_ms == 0);
  setenv("GCR_LEAVE_RUNNING", "yes", 1);
  auto bad = load_config(Stage::dump);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("GCR_LEAVE_RUNNING") != std::string::npos);
}

TEST_CASE("gcr.conf: key = value lines, comments, and the environment winning over the file") {
  CleanEnv env;
  std::string path = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                     "/gcr-config-test-" + std::to_string(getpid()) + ".conf";
  {
    std::ofstream out(path);
    out << "# podman passes CRIU no environment\n"
           "criu_images = self-contained\n"
           "gcrd_socket=/run/other/gcrd.sock   # trailing comment\n"
           "\n"
           "store = /srv/gcr\n"
           "lock_timeout_ms = 1500\n"
           "driver = /opt/driver/libcuda.so.1\n";
  }
  setenv("GCR_CONFIG", path.c_str(), 1);
  auto c = load_config(Stage::dump);
  REQUIRE(c);
  CHECK(c->self_contained);
  CHECK(c->gcrd_socket == "/run/other/gcrd.sock");
  CHECK(c->store == "/srv/gcr");
  CHECK(c->lock_timeout_ms == 1500);
  CHECK(c->driver == "/opt/driver/libcuda.so.1");
  CHECK(c->use_gcrd);
  CHECK(c->file == path);
  setenv("GCR_STORE", "/elsewhere", 1);
  setenv("GCR_CRIU_IMAGES", "reference", 1);
  c = load_config(Stage::dump);
  REQUIRE(c);
  CHECK(c->store == "/elsewhere");
  CHECK_FALSE(c->self_contained);
  setenv("GCR_CRIU_IMAGES", "inline", 1);
  auto bad = load_config(Stage::restore);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("GCR_CRIU_IMAGES") != std::string::npos);
  unsetenv("GCR_CRIU_IMAGES");
  {
    std::ofstream out(path);
    out << "criu_images = self-contained\nstor = /srv/gcr\n";  // a typo stops CRIU at init
  }
  bad = load_config(Stage::dump);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find(":2:") != std::string::npos);
  CHECK(bad.error().message.find("stor = /srv/gcr") != std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE("the config file parser names the line of what it refuses") {
  CHECK(parse_config_file("gcrd = off\n", "f"));
  CHECK(parse_config_file("  # only a comment\n\n", "f")->empty());
  auto no_eq = parse_config_file("gcrd off\n", "gcr.conf");
  REQUIRE_FALSE(no_eq);
  CHECK(no_eq.error().message.find("gcr.conf:1:") != std::string::npos);
}

TEST_CASE("the dump's root from CRIU's command line (Note [Seizing per dump])") {
  using std::string_literals::operator""s;
  CHECK(tree_from_cmdline("criu\0dump\0-t\0"
                          "1234\0-D\0img\0"s) == 1234);
  CHECK(tree_from_cmdline("criu\0dump\0--tree\0"
                          "77\0"s) == 77);
  CHECK(tree_from_cmdline("criu\0dump\0--tree=88\0"s) == 88);
  CHECK(tree_from_cmdline("criu\0dump\0-t99\0"s) == 99);
  CHECK_FALSE(
      tree_from_cmdline("criu\0swrk\0"
                        "3\0"s));
  CHECK_FALSE(tree_from_cmdline("criu\0dump\0-t\0abc\0"s));
  CHECK_FALSE(tree_from_cmdline("criu\0dump\0-t\0"s));
}
