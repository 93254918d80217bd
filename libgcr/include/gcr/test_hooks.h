// The test-only hooks of gcr and gcrd (docs/configuration.md, "Test-only hooks"): the variables
// that crash, pause or slow a program on purpose, or keep what it would remove, so that gcr's
// tests can reach a known step. Parsed with the rest of the configuration (gcr/settings.h), into
// Settings::test_hooks. Not for production. The CRIU plugin's GCR_PLUGIN_FAULT is not here: the
// plugin reads its own (criu-plugin/).
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace gcr {

namespace store {

// The store's named crash and pause points (store/fault.h; STYLE.md §2, after CRIU's
// fault-injection.h): GCR_FAULT=<name> makes the process _exit(86) at that step.
enum class Fault {
  after_pack_create,       // a new pack's header is in packs/, no record yet
  after_chunk_write,       // the first record of this writer has reached its pack
  after_pack_sync,         // packs fsynced, no index yet
  after_index_rename,      // packs sealed, no manifest yet
  before_manifest_rename,  // manifest durable in tmp/
  after_manifest_rename,   // checkpoint committed, manifests/ not yet fsynced, no tag
  after_tag_rename,        // tag in place, lock still held
  gc_after_rewrite,        // gc: a rewritten pack is sealed, the old one not yet deleted
  gc_after_index_delete,   // gc: an old pack's index is gone, the pack not yet
  transfer_after_pack,     // push/pull: a pack and its index are in the destination, no manifest
  transfer_before_check,   // push/pull: all packs written; the packs reused not yet re-checked
  transfer_after_stage,    // a staged pull (a streamed restore): its first stage is in, no more
};

// Every Fault, in order: a point added above is added here too.
inline constexpr Fault kAllFaults[] = {
    Fault::after_pack_create,   Fault::after_chunk_write,      Fault::after_pack_sync,
    Fault::after_index_rename,  Fault::before_manifest_rename, Fault::after_manifest_rename,
    Fault::after_tag_rename,    Fault::gc_after_rewrite,       Fault::gc_after_index_delete,
    Fault::transfer_after_pack, Fault::transfer_before_check,  Fault::transfer_after_stage};

}  // namespace store

// gcrd's pause points (daemon/pause_point.h, which says where each is), the names
// GCR_GCRD_PAUSE_AT accepts. A point added to gcrd is added here too.
inline constexpr std::string_view kGcrdPausePoints[] = {
    "request",    "quiesced", "parked",     "dumped",  "draining",   "reply",
    "lazy-pages", "restored", "load-table", "loading", "host-pages", "stage",
    "job-committed", "bystander-frozen"};

struct TestHooks {
  // GCR_GCRD_PAUSE_AT=NAME[:SECONDS]: gcrd sleeps `gcrd_pause` at point NAME (one of
  // kGcrdPausePoints). Empty: no pause.
  std::string gcrd_pause_at;
  std::chrono::seconds gcrd_pause{30};
  std::optional<store::Fault> fault;                // GCR_FAULT: _exit(86) at that step
  std::optional<store::Fault> pause;                // GCR_PAUSE: wait at that step ...
  std::optional<std::filesystem::path> pause_file;  // ... while GCR_PAUSE_FILE exists
  bool keep_work = false;  // GCR_KEEP_WORK=1: gcrd keeps work directories, abandoned ones too
  bool no_uring = false;   // GCR_NO_URING (not empty, not 0): store I/O never uses io_uring
  // GCR_NET_PLAINTEXT=1: gcrd-net skips TLS after the proofs, for bench/migrate_bench.py's rows
  // without encryption; both ends must set it (Note [An encrypted channel] in net_tls.h).
  bool net_plaintext = false;
};

}  // namespace gcr
