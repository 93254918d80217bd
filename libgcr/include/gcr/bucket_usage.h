// `gcr image du` on a store seen through its Backend (a bucket): the same figures as a local
// store's (usage.h). Per checkpoint: its logical bytes by dedup class (its CHUNKS) and what it
// added to its store when written (STATS stored_bytes). For the store: what the sealed packs hold
// for live chunks, one copy each; the pack objects' total size; garbage, which is everything else
// in them (dead records, second copies, packs without an index) that gc would reclaim; and of that,
// what is already marked for gc (docs/image-format.md §8.3).
#pragma once

#include <optional>

#include "gcr/store.h"
#include "gcr/store_backend.h"

namespace gcr::store {

struct BackendUsage {
  Usage usage;
  std::uint64_t marked_bytes = 0;  // in packs gc has marked
  std::uint64_t packs = 0;
};

Result<BackendUsage> backend_usage(Backend& store, std::optional<CheckpointId> id);

}  // namespace gcr::store
