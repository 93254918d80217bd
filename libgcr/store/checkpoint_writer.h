// The store's CheckpointWriter (gcr/store.h): objects and meta of one checkpoint, the shared
// gc.lock it holds from begin to commit or abort, and the commit itself (commit.h).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "gcr/store.h"
#include "store/store_state.h"

namespace gcr::store {

Result<std::unique_ptr<CheckpointWriter>> make_checkpoint_writer(
    std::shared_ptr<StoreState> state, std::map<std::string, std::string> meta,
    std::optional<CheckpointId> parent);

}  // namespace gcr::store
