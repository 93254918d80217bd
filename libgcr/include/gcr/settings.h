// The configuration of the gcr command and gcrd (docs/configuration.md): every GCR_* variable they
// read, parsed once per program into one typed, const Settings. Code asks settings(), never
// getenv. A value out of range or malformed gives a warning naming the variable, the value and
// what is accepted, and its default is used.
//
// Not here, on purpose: the interposer's, the CRIU plugin's and simgpu's variables (those programs
// read their own: interpose/config.h, criu-plugin/config.cpp, tools/simgpu/config.cpp); the S3
// variables, which load_s3_config (store/s3_config.h) reads through env_lookup() with the AWS
// ones; and variables that are not gcr's (HOME, XDG_*, PATH, LD_*, LISTEN_*, CRIU_FAULT).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "gcr/test_hooks.h"

namespace gcr {

struct Settings {
  // Store and paths. Unset or empty: nullopt, and the code that uses one picks its default.
  std::optional<std::string> store;                      // GCR_STORE: a directory or s3://...
  std::optional<std::filesystem::path> gcrd_socket;      // GCR_GCRD_SOCKET
  std::optional<std::filesystem::path> work_dir;         // GCR_WORK_DIR
  std::optional<std::filesystem::path> memory_work_dir;  // GCR_MEMORY_WORK_DIR ("off": nullopt)
  std::optional<std::filesystem::path> cache_dir;        // GCR_CACHE_DIR
  // What gcr runs or loads, as set. As root such a path is taken only when only root can change
  // what it names: read them through path_for_root(variable, value) (gcr/trusted_path.h).
  std::optional<std::filesystem::path> gcrd;             // GCR_GCRD
  std::optional<std::filesystem::path> interposer;       // GCR_INTERPOSER
  std::optional<std::filesystem::path> real_libcuda;     // GCR_REAL_LIBCUDA
  std::optional<std::filesystem::path> criu;             // GCR_CRIU
  std::optional<std::filesystem::path> criu_plugin_dir;  // GCR_CRIU_PLUGIN_DIR
  bool quiet = false;                                    // GCR_QUIET set, to any value
  // GCR_START_GCRD=0: gcr never starts a gcrd itself; the host's gcrd is a service (Slurm nodes).
  bool start_gcrd = true;

  // Checkpoint and restore (gcrd). Each switch but pinned_frozen is on unless its variable is 0.
  bool criu_early = true;                             // GCR_CRIU_EARLY
  bool criu_cow_dump = true;                          // GCR_CRIU_COW_DUMP
  bool criu_cow_track = true;                         // GCR_CRIU_COW_TRACK
  bool criu_track_mem = true;                         // GCR_CRIU_TRACK_MEM
  bool criu_lazy_pages = true;                        // GCR_CRIU_LAZY_PAGES
  bool host_pages_from_store = true;                  // GCR_HOST_PAGES_FROM_STORE
  bool pinned_frozen = false;                         // GCR_PINNED_FROZEN=1
  std::uint64_t host_track_block_bytes = 2ull << 20;  // GCR_HOST_TRACK_BLOCK: a power of two
  std::uint64_t drain_mib_per_s = 0;                  // GCR_DRAIN_MIB_PER_S; 0: no bound
  std::uint64_t load_mib_per_s = 0;                   // GCR_LOAD_MIB_PER_S; 0: no bound
  std::uint64_t piece_cache_bytes = 1ull << 30;       // GCR_PIECE_CACHE_MIB, in bytes

  // Network and migration.
  std::chrono::milliseconds net_timeout{15'000};  // GCR_NET_TIMEOUT_MS
  std::chrono::seconds stage_hold{600};           // GCR_STAGE_HOLD_S

  // Buckets, the local cache and checkpoints still arriving.
  std::uint64_t cache_max_bytes = 20ull << 30;  // GCR_CACHE_MAX_BYTES
  bool stream_restore = true;                   // GCR_STREAM_RESTORE
  std::chrono::seconds arrival_idle{60};        // GCR_ARRIVAL_IDLE_S

  TestHooks test_hooks;  // GCR_GCRD_PAUSE_AT, GCR_FAULT, GCR_PAUSE(_FILE), GCR_KEEP_WORK, ...
};

// A variable's value, or nullptr when it is unset.
using EnvLookup = std::function<const char*(const char*)>;

// The program's environment (std::getenv): the one place gcr and gcrd read it for their own
// variables, here and in load_s3_config.
const char* env_lookup(const char* name);

// Settings from `lookup`; no other input, so tests pass a stand-in. Each value out of range or
// malformed adds one line to *warnings (when not null) naming the variable, the value and what is
// accepted, and leaves that field its default. Never fails.
Settings parse_settings(const EnvLookup& lookup, std::vector<std::string>* warnings);

// This program's settings: parse_settings(env_lookup) at the first call (thread-safe), whose
// warnings go to stderr once, each prefixed by the program's name ("gcr: ", "gcrd: "). Later
// changes to the environment are not seen.
const Settings& settings();

}  // namespace gcr
