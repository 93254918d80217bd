// usage: bytes by dedup level for one checkpoint (from its manifest) or the whole store (all
// manifests, plus what the packs hold live and as garbage).
#pragma once

#include <optional>

#include "gcr/store.h"
#include "store/store_state.h"

namespace gcr::store {

Result<Usage> store_usage(StoreState& state, std::optional<CheckpointId> id);

// Adds one checkpoint's logical bytes, chunk count and bytes by dedup class (its CHUNKS).
void add_checkpoint_usage(Usage& u, const Manifest& m);

}  // namespace gcr::store
