// verify: a second reader of the whole store (STYLE.md §3): reads back every chunk one checkpoint
// or all of them name and checks it, and names the checkpoint, object and chunk of any damage.
#pragma once

#include <functional>
#include <optional>

#include "gcr/store.h"
#include "store/store_state.h"

namespace gcr::store {

Result<VerifyReport> verify_store(
    StoreState& state, std::optional<CheckpointId> id,
    const std::function<void(std::uint64_t, std::uint64_t)>& progress);

}  // namespace gcr::store
