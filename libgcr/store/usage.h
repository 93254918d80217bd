// usage: bytes by dedup level for one checkpoint (from its manifest) or the whole store (all
// manifests, plus what the packs hold live and as garbage).
#pragma once

#include <optional>
#include <unordered_set>

#include "gcr/store.h"
#include "store/pack_format.h"
#include "store/store_state.h"

namespace gcr::store {

Result<Usage> store_usage(StoreState& state, std::optional<CheckpointId> id);

// Adds one checkpoint's logical bytes, chunk count and bytes by dedup class (its CHUNKS).
void add_checkpoint_usage(Usage& u, const Manifest& m);

// Adds to stored_bytes the live chunks of one pack not counted yet (one copy each, into
// `counted`); returns the bytes of its records they take, with its header when any.
std::uint64_t add_live_pack_usage(Usage& u, const PackIndex& index,
                                  const std::unordered_set<ChunkId, Id128Hash>& live,
                                  std::unordered_set<ChunkId, Id128Hash>& counted);

}  // namespace gcr::store
