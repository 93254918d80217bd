// Named crash and pause points (STYLE.md §2, after CRIU's fault-injection.h): GCR_FAULT=<name>,
// read once, makes the process _exit(86) at that step, so tests can kill the store at every step of
// a commit or a gc and check that nothing committed is lost.
#pragma once

#include <string_view>

namespace gcr::store {

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

inline constexpr int kFaultExitCode = 86;

std::string_view fault_name(Fault f);

// _exit(kFaultExitCode) when GCR_FAULT names f; nothing otherwise. Cheap: one compare.
void fault_point(Fault f);

// For race tests: when GCR_PAUSE names f, creates the file GCR_PAUSE_FILE and waits until the test
// removes it (at most 120 s), so that another process can act at exactly this step.
void pause_point(Fault f);

}  // namespace gcr::store
