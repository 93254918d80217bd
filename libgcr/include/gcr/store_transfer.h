// Transfer: copies one checkpoint from a store to another, whichever their homes
// (gcr/store_backend.h): `gcr image push/pull`, a checkpoint written to a bucket (staged in a local
// store first) and a restore from one (pulled into a local cache store first). Only chunks the
// destination lacks move: it lists the destination's pack indexes first (dedup across machines),
// then reads the missing chunks' records from the source with ranged reads, many at once, and
// checks each one (record header against the index, codec, XXH3-128 against the chunk id) before
// writing it: no damaged byte crosses. The records go, unchanged, into new packs of the destination
// (each pack, then its index), and the manifest, byte for byte, last, with one create-only write:
// the checkpoint exists there from that write on, and an interrupted transfer leaves only packs no
// manifest names (gc's). Run again, it finds what arrived and moves the rest (resumable).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "gcr/chunk_id.h"
#include "gcr/manifest.h"
#include "gcr/result.h"
#include "gcr/store_backend.h"

namespace gcr::store {

struct TransferOptions {
  std::optional<std::string> tag;                    // tags/<tag> in the destination names it
  std::uint64_t pack_target_bytes = 16ull << 20;     // a new destination pack past this size
  std::uint64_t max_range_bytes = 8ull << 20;        // one ranged read at most
  std::uint64_t max_range_gap_bytes = 256ull << 10;  // records this close share one read
  // Called from the copying threads as packs arrive: raw bytes of the chunks copied so far, of
  // all the destination lacked. May run concurrently; must be quick.
  std::function<void(std::uint64_t done, std::uint64_t total)> progress;
  // Chunks to bring first, stage after stage, each stage in its own order (a restore streamed
  // from a bucket: the CRIU files, then the regions in first-touch order); the checkpoint's other
  // chunks come last. stage_done(i) is called once stage i is all in sealed destination packs.
  std::vector<std::vector<ChunkId>> stages;
  std::function<void(std::size_t stage)> stage_done;
  // Set from another thread to stop the transfer before its next pack (Errc::busy, "cancelled").
  const std::atomic<bool>* cancel = nullptr;
  // Where each chunk was in the destination after an earlier transfer by this writer (gcr
  // migrate's rounds): when given and not empty it replaces reading every index of the
  // destination (one request per pack, a round trip each over a network), and it is left holding
  // this transfer's packs too. Safe when stale: the commit's re-check of the packs (Note [A commit
  // re-checks its packs]) copies again whatever it names from a pack that is gone or marked.
  std::unordered_map<ChunkId, PackId, Id128Hash>* known_in_destination = nullptr;
};

struct TransferReport {
  CheckpointId id;
  bool already_there = false;        // the destination had the manifest: nothing moved
  std::uint64_t chunks = 0;          // distinct non-zero chunks the checkpoint names
  std::uint64_t chunks_present = 0;  // of those, already in the destination (dedup)
  std::uint64_t chunks_copied = 0;
  std::uint64_t logical_bytes = 0;  // raw bytes of the distinct non-zero chunks
  std::uint64_t copied_bytes = 0;   // record bytes written to the destination
  std::uint64_t present_bytes = 0;  // raw bytes not moved because the destination had them
  std::uint64_t packs_written = 0;
  std::uint64_t elapsed_ns = 0;
};

// A tag, a full id, or a unique prefix of 8+ hex digits, in `store`. by_tag (optional) is set
// when it was a tag.
Result<CheckpointId> resolve_checkpoint(Backend& store, std::string_view name,
                                        bool* by_tag = nullptr);

// Whether `store` holds checkpoint `id` (its manifest); an error only when it cannot say.
Result<bool> has_checkpoint(Backend& store, const CheckpointId& id);

// Checkpoint `id`'s manifest in `store`, decoded and checked against its name.
Result<Manifest> read_checkpoint_manifest(Backend& store, const CheckpointId& id);

// What copying checkpoint `id` from `from` to `to` would add there: the raw bytes of the distinct
// non-zero chunks it names that `to` lacks (0 when `to` has its manifest). For a destination with
// a budget (Note [Checkpoints in peers' memory] in daemon/memory_tier.h); the records written are
// at most this plus their headers (they are compressed or stored raw).
Result<std::uint64_t> bytes_to_copy(Backend& from, Backend& to, const CheckpointId& id);

// Copies checkpoint `id` from `from` to `to` (see above).
Result<TransferReport> copy_checkpoint(Backend& from, Backend& to, const CheckpointId& id,
                                       const TransferOptions& options);

// "pushed 3f2a… to s3://b/p: 12.0 MiB new of 1.0 GiB (dedup 98.8%), 1 pack, 0.41 s (29 MiB/s)".
std::string describe_transfer(const TransferReport& r, std::string_view verb,
                              std::string_view where);

}  // namespace gcr::store
