// gc (docs §6): under the exclusive gc.lock, drops what no committed manifest names: unsealed
// packs, tmp/ files, packs with no live chunk, dangling tags; rewrites packs less than half live.
#pragma once

#include "gcr/store.h"
#include "store/store_state.h"

namespace gcr::store {

Result<GcReport> collect_garbage(StoreState& state);

}  // namespace gcr::store
