// gcr/settings.h: the GCR_* variables of gcr and gcrd parsed from stand-in environments, never
// the test's own (settings() reads that once, at its first call).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "gcr/settings.h"

using namespace gcr;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

// A stand-in environment and the warnings of its parse.
struct Parsed {
  Settings s;
  std::vector<std::string> warnings;
};

Parsed parse(const std::map<std::string, std::string>& env) {
  Parsed p;
  p.s = parse_settings(
      [&env](const char* name) {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      &p.warnings);
  return p;
}

}  // namespace

TEST_CASE("with no variable set every setting is its default") {
  Parsed p = parse({});
  const Settings& s = p.s;
  CHECK(p.warnings.empty());
  CHECK_FALSE(s.store);
  CHECK_FALSE(s.gcrd_socket);
  CHECK_FALSE(s.work_dir);
  CHECK_FALSE(s.memory_work_dir);
  CHECK_FALSE(s.cache_dir);
  CHECK_FALSE(s.gcrd);
  CHECK_FALSE(s.interposer);
  CHECK_FALSE(s.real_libcuda);
  CHECK_FALSE(s.criu);
  CHECK_FALSE(s.criu_plugin_dir);
  CHECK_FALSE(s.quiet);
  CHECK(s.criu_early);
  CHECK(s.criu_cow_dump);
  CHECK(s.criu_cow_track);
  CHECK(s.criu_track_mem);
  CHECK(s.criu_lazy_pages);
  CHECK(s.host_pages_from_store);
  CHECK_FALSE(s.pinned_frozen);
  CHECK(s.host_track_block_bytes == 2u << 20);
  CHECK(s.drain_mib_per_s == 0);
  CHECK(s.load_mib_per_s == 0);
  CHECK(s.piece_cache_bytes == 1ull << 30);
  CHECK(s.net_timeout == 15s);
  CHECK(s.stage_hold == 600s);
  CHECK(s.cache_max_bytes == 20ull << 30);
  CHECK(s.stream_restore);
  CHECK(s.start_gcrd);
  CHECK(s.arrival_idle == 60s);
  const TestHooks& h = s.test_hooks;
  CHECK(h.gcrd_pause_at.empty());
  CHECK(h.gcrd_pause == 30s);
  CHECK_FALSE(h.fault);
  CHECK_FALSE(h.pause);
  CHECK_FALSE(h.pause_file);
  CHECK_FALSE(h.keep_work);
  CHECK_FALSE(h.no_uring);
}

TEST_CASE("each variable reaches its field") {
  Parsed p = parse({{"GCR_STORE", "s3://bucket/prefix"},
                    {"GCR_GCRD_SOCKET", "/run/x/gcrd.sock"},
                    {"GCR_WORK_DIR", "/var/tmp/work"},
                    {"GCR_MEMORY_WORK_DIR", "/dev/shm/gcr"},
                    {"GCR_CACHE_DIR", "/var/cache/x"},
                    {"GCR_GCRD", "/opt/gcr/gcrd"},
                    {"GCR_INTERPOSER", "/opt/gcr/libcuda.so.1"},
                    {"GCR_REAL_LIBCUDA", "/usr/lib/libcuda.so.1"},
                    {"GCR_CRIU", "/opt/criu/criu"},
                    {"GCR_CRIU_PLUGIN_DIR", "/opt/gcr/plugin"},
                    {"GCR_QUIET", "1"},
                    {"GCR_PINNED_FROZEN", "1"},
                    {"GCR_HOST_TRACK_BLOCK", "0x10000"},
                    {"GCR_DRAIN_MIB_PER_S", "200"},
                    {"GCR_LOAD_MIB_PER_S", "300"},
                    {"GCR_PIECE_CACHE_MIB", "64"},
                    {"GCR_NET_TIMEOUT_MS", "2500"},
                    {"GCR_STAGE_HOLD_S", "30"},
                    {"GCR_CACHE_MAX_BYTES", "512M"},
                    {"GCR_ARRIVAL_IDLE_S", "5"}});
  const Settings& s = p.s;
  CHECK(p.warnings.empty());
  CHECK(s.store == "s3://bucket/prefix");
  CHECK(s.gcrd_socket == fs::path("/run/x/gcrd.sock"));
  CHECK(s.work_dir == fs::path("/var/tmp/work"));
  CHECK(s.memory_work_dir == fs::path("/dev/shm/gcr"));
  CHECK(s.cache_dir == fs::path("/var/cache/x"));
  CHECK(s.gcrd == fs::path("/opt/gcr/gcrd"));
  CHECK(s.interposer == fs::path("/opt/gcr/libcuda.so.1"));
  CHECK(s.real_libcuda == fs::path("/usr/lib/libcuda.so.1"));
  CHECK(s.criu == fs::path("/opt/criu/criu"));
  CHECK(s.criu_plugin_dir == fs::path("/opt/gcr/plugin"));
  CHECK(s.quiet);
  CHECK(s.pinned_frozen);
  CHECK(s.host_track_block_bytes == 64u << 10);
  CHECK(s.drain_mib_per_s == 200);
  CHECK(s.load_mib_per_s == 300);
  CHECK(s.piece_cache_bytes == 64u << 20);
  CHECK(s.net_timeout == 2500ms);
  CHECK(s.stage_hold == 30s);
  CHECK(s.cache_max_bytes == 512u << 20);
  CHECK(s.arrival_idle == 5s);
}

TEST_CASE("a switch is off only at 0; GCR_QUIET counts when set at all") {
  const char* switches[] = {"GCR_CRIU_EARLY",      "GCR_CRIU_COW_DUMP",
                            "GCR_CRIU_COW_TRACK",  "GCR_CRIU_TRACK_MEM",
                            "GCR_CRIU_LAZY_PAGES", "GCR_HOST_PAGES_FROM_STORE",
                            "GCR_STREAM_RESTORE",  "GCR_START_GCRD"};
  std::map<std::string, std::string> off, on;
  for (const char* v : switches) {
    off[v] = "0";
    on[v] = "no";  // anything but 0
  }
  Parsed z = parse(off);
  CHECK_FALSE(z.s.criu_early);
  CHECK_FALSE(z.s.criu_cow_dump);
  CHECK_FALSE(z.s.criu_cow_track);
  CHECK_FALSE(z.s.criu_track_mem);
  CHECK_FALSE(z.s.criu_lazy_pages);
  CHECK_FALSE(z.s.host_pages_from_store);
  CHECK_FALSE(z.s.stream_restore);
  CHECK_FALSE(z.s.start_gcrd);
  Parsed o = parse(on);
  CHECK(o.warnings.empty());
  CHECK(o.s.criu_early);
  CHECK(o.s.criu_cow_dump);
  CHECK(o.s.criu_cow_track);
  CHECK(o.s.criu_track_mem);
  CHECK(o.s.criu_lazy_pages);
  CHECK(o.s.host_pages_from_store);
  CHECK(o.s.stream_restore);
  CHECK(o.s.start_gcrd);
  CHECK(parse({{"GCR_QUIET", ""}}).s.quiet);
}

TEST_CASE("an empty value is unset, and GCR_MEMORY_WORK_DIR=off is none") {
  Parsed p = parse({{"GCR_STORE", ""},
                    {"GCR_WORK_DIR", ""},
                    {"GCR_STAGE_HOLD_S", ""},
                    {"GCR_MEMORY_WORK_DIR", "off"},
                    {"GCR_FAULT", ""}});
  CHECK(p.warnings.empty());
  CHECK_FALSE(p.s.store);
  CHECK_FALSE(p.s.work_dir);
  CHECK(p.s.stage_hold == 600s);
  CHECK_FALSE(p.s.memory_work_dir);
  CHECK_FALSE(p.s.test_hooks.fault);
}

TEST_CASE("a value out of range or malformed gives one warning and the default") {
  struct Bad {
    const char* name;
    const char* value;
    const char* accepted;  // a part of what the warning says is accepted
  };
  const Bad bad[] = {
      {"GCR_NET_TIMEOUT_MS", "499", "500 to 3600000"},
      {"GCR_NET_TIMEOUT_MS", "3600001", "500 to 3600000"},
      {"GCR_NET_TIMEOUT_MS", "2000x", "milliseconds"},
      {"GCR_STAGE_HOLD_S", "0", "1 to 86400"},
      {"GCR_STAGE_HOLD_S", "86401", "1 to 86400"},
      {"GCR_STAGE_HOLD_S", "-5", "seconds"},
      {"GCR_ARRIVAL_IDLE_S", "0", "1 to 86400"},
      {"GCR_ARRIVAL_IDLE_S", "ten", "seconds"},
      {"GCR_DRAIN_MIB_PER_S", "100MB", "MiB/s"},
      {"GCR_LOAD_MIB_PER_S", "99999999999999999999", "0 to 1048576"},
      {"GCR_PIECE_CACHE_MIB", "lots", "MiB"},
      {"GCR_HOST_TRACK_BLOCK", "3000", "a power of two"},
      {"GCR_HOST_TRACK_BLOCK", "2048", "at least 4096"},
      {"GCR_HOST_TRACK_BLOCK", "0x", "0x hex"},
      {"GCR_CACHE_MAX_BYTES", "lots", "K, M, G or T"},
      {"GCR_CACHE_MAX_BYTES", "99999999999T", "K, M, G or T"},
      {"GCR_PINNED_FROZEN", "yes", "1 or 0"},
  };
  const Settings defaults;
  for (const Bad& b : bad) {
    INFO(b.name << "=" << b.value);
    Parsed p = parse({{b.name, b.value}});
    REQUIRE(p.warnings.size() == 1);
    const std::string& w = p.warnings[0];
    CHECK_THAT(w, Catch::StartsWith(std::string(b.name) + "='" + b.value + "' ignored"));
    CHECK_THAT(w, Catch::Contains(b.accepted) && Catch::Contains("; using "));
    const Settings& s = p.s;
    CHECK(s.net_timeout == defaults.net_timeout);
    CHECK(s.stage_hold == defaults.stage_hold);
    CHECK(s.arrival_idle == defaults.arrival_idle);
    CHECK(s.drain_mib_per_s == defaults.drain_mib_per_s);
    CHECK(s.load_mib_per_s == defaults.load_mib_per_s);
    CHECK(s.piece_cache_bytes == defaults.piece_cache_bytes);
    CHECK(s.host_track_block_bytes == defaults.host_track_block_bytes);
    CHECK(s.cache_max_bytes == defaults.cache_max_bytes);
    CHECK(s.pinned_frozen == defaults.pinned_frozen);
  }
  CHECK_THAT(
      parse({{"GCR_STAGE_HOLD_S", "0"}}).warnings[0],
      Catch::Equals("GCR_STAGE_HOLD_S='0' ignored: expected seconds, 1 to 86400; using 600"));
}

TEST_CASE("the bounds themselves are accepted") {
  Parsed p = parse({{"GCR_NET_TIMEOUT_MS", "500"},
                    {"GCR_STAGE_HOLD_S", "86400"},
                    {"GCR_HOST_TRACK_BLOCK", "4096"},
                    {"GCR_PIECE_CACHE_MIB", "0"},
                    {"GCR_CACHE_MAX_BYTES", "2g"}});
  CHECK(p.warnings.empty());
  CHECK(p.s.net_timeout == 500ms);
  CHECK(p.s.stage_hold == 86400s);
  CHECK(p.s.host_track_block_bytes == 4096);
  CHECK(p.s.piece_cache_bytes == 0);
  CHECK(p.s.cache_max_bytes == 2ull << 30);
}

TEST_CASE("the test hooks are parsed with the rest") {
  Parsed p = parse({{"GCR_GCRD_PAUSE_AT", "draining:7"},
                    {"GCR_FAULT", "after-pack-sync"},
                    {"GCR_PAUSE", "gc-after-rewrite"},
                    {"GCR_PAUSE_FILE", "/tmp/pause"},
                    {"GCR_KEEP_WORK", "1"},
                    {"GCR_NO_URING", "1"}});
  CHECK(p.warnings.empty());
  const TestHooks& h = p.s.test_hooks;
  CHECK(h.gcrd_pause_at == "draining");
  CHECK(h.gcrd_pause == 7s);
  CHECK(h.fault == store::Fault::after_pack_sync);
  CHECK(h.pause == store::Fault::gc_after_rewrite);
  CHECK(h.pause_file == fs::path("/tmp/pause"));
  CHECK(h.keep_work);
  CHECK(h.no_uring);

  SECTION("a pause point without seconds waits 30 s") {
    Parsed q = parse({{"GCR_GCRD_PAUSE_AT", "request"}});
    CHECK(q.warnings.empty());
    CHECK(q.s.test_hooks.gcrd_pause_at == "request");
    CHECK(q.s.test_hooks.gcrd_pause == 30s);
  }
  SECTION("every point gcrd has is known") {
    for (std::string_view point : kGcrdPausePoints) {
      Parsed q = parse({{"GCR_GCRD_PAUSE_AT", std::string(point) + ":0"}});
      CHECK(q.warnings.empty());
      CHECK(q.s.test_hooks.gcrd_pause_at == point);
      CHECK(q.s.test_hooks.gcrd_pause == 0s);
    }
  }
  SECTION("GCR_NO_URING=0 and GCR_KEEP_WORK=0 are off") {
    Parsed q = parse({{"GCR_NO_URING", "0"}, {"GCR_KEEP_WORK", "0"}});
    CHECK_FALSE(q.s.test_hooks.no_uring);
    CHECK_FALSE(q.s.test_hooks.keep_work);
  }
}

TEST_CASE("a misspelt hook is reported and does nothing") {
  Parsed p = parse({{"GCR_FAULT", "after-pack-synced"}, {"GCR_PAUSE", "later"}});
  REQUIRE(p.warnings.size() == 2);
  CHECK_THAT(p.warnings[0], Catch::StartsWith("GCR_FAULT='after-pack-synced' ignored") &&
                                Catch::Contains("after-pack-sync") && Catch::Contains("none"));
  CHECK_THAT(p.warnings[1], Catch::StartsWith("GCR_PAUSE='later' ignored"));
  CHECK_FALSE(p.s.test_hooks.fault);
  CHECK_FALSE(p.s.test_hooks.pause);

  Parsed q = parse({{"GCR_GCRD_PAUSE_AT", "parkd:5"}});
  REQUIRE(q.warnings.size() == 1);
  CHECK_THAT(q.warnings[0], Catch::Contains("parked") && Catch::Contains("no pause"));
  CHECK(q.s.test_hooks.gcrd_pause_at.empty());

  Parsed r = parse({{"GCR_GCRD_PAUSE_AT", "parked:soon"}});
  REQUIRE(r.warnings.size() == 1);
  CHECK_THAT(r.warnings[0], Catch::Contains("SECONDS 0 to 86400"));
  CHECK(r.s.test_hooks.gcrd_pause_at == "parked");  // the point stays, with its default wait
  CHECK(r.s.test_hooks.gcrd_pause == 30s);
}

TEST_CASE("without a warnings list the parse is quiet and the defaults hold") {
  Settings s = parse_settings(
      [](const char* n) { return std::string_view(n) == "GCR_NET_TIMEOUT_MS" ? "1" : nullptr; },
      nullptr);
  CHECK(s.net_timeout == 15s);
}

TEST_CASE("settings() is parsed once: later changes to the environment are not seen") {
  const Settings& first = settings();
  const auto hold = first.stage_hold;
  ::setenv("GCR_STAGE_HOLD_S", hold == 77s ? "78" : "77", 1);
  CHECK(&settings() == &first);
  CHECK(settings().stage_hold == hold);
  ::unsetenv("GCR_STAGE_HOLD_S");
}
