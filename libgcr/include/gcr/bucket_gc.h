// gc of a store in a bucket (docs/image-format.md §8.3): mark and sweep with a grace period, safe
// against writers on other machines without a lock server.
//
// Note [Bucket gc and writers]. A local store's gc holds gc.lock, so no writer is open while it
// decides. A bucket has no lock, and a writer on another machine may, at any moment, have found a
// chunk in a pack that no manifest names (its dedup), or have uploaded packs it has not committed
// yet. So gc never deletes a pack in the run that finds it unused:
//   - mark: a pack no manifest names, last written more than `grace` ago, gets packs/<P>.dead;
//   - sweep: a marked pack still unused when its mark is more than `grace` old is deleted (index,
//     pack, then mark); a marked pack some manifest names again is unmarked.
// A writer ignores marked packs when it looks for chunks it need not send, and right before its
// commit lists packs/ again: a chunk it means to name in a pack that is marked or gone is copied
// again into a new pack (transfer.cpp, Note [A commit re-checks its packs]). A pack the writer
// saw unmarked at that check cannot be deleted before its mark, written later, is `grace` old;
// the sweep reads the manifests after it has seen the mark that old, so it sees the writer's
// manifest as long as the writer committed within `grace` of its check (one PUT: seconds; the
// grace is an hour by default). All ages are by the endpoint's clock (each object's
// LastModified against the Date of the listing), so machines' clocks need not agree.
#pragma once

#include <cstdint>

#include "gcr/result.h"
#include "gcr/store_backend.h"

namespace gcr::store {

struct BucketGcOptions {
  std::int64_t grace_seconds = 3600;
  // Only say what would be marked, unmarked and deleted.
  bool dry_run = false;
};

struct BucketGcReport {
  std::uint64_t packs = 0;           // packs (or indexes without a pack) found
  std::uint64_t packs_marked = 0;    // unused, marked by this run
  std::uint64_t packs_unmarked = 0;  // marked earlier, named again by a manifest
  std::uint64_t packs_deleted = 0;   // marked more than the grace ago, still unused
  std::uint64_t packs_waiting = 0;   // unused but too young to mark, or marked too recently
  std::uint64_t bytes_freed = 0;
  std::uint64_t bytes_waiting = 0;  // in packs marked, waiting for their grace to pass
  std::uint64_t passes = 0;
};

// With grace 0, a second pass sweeps what the first marked (for a bucket no one else writes to).
Result<BucketGcReport> collect_bucket_garbage(Backend& store, const BucketGcOptions& options);

}  // namespace gcr::store
