// restore-server/criu_plugin/config.cpp: the GCR_* settings each stage reads.
#include "config.h"

#include <catch2/catch.hpp>
#include <cstdlib>

using namespace gcr::criu_plugin;

namespace {
struct CleanEnv {
  CleanEnv() { clear(); }
  ~CleanEnv() { clear(); }
  static void clear() {
    for (const char* v : {"GCR_LOCK_TIMEOUT_MS", "GCR_DEVICE_MAP", "GCR_LEAVE_RUNNING"})
      unsetenv(v);
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
