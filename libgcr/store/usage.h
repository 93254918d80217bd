// usage: bytes by dedup level for one checkpoint (from its manifest) or the whole store (all
// manifests, plus what the packs hold live and as garbage).
#pragma once

#include <optional>

#include "gcr/store.h"
#include "store/store_state.h"

namespace gcr::store {

Result<Usage> store_usage(StoreState& state, std::optional<CheckpointId> id);

}  // namespace gcr::store
