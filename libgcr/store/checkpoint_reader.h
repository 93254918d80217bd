// The store's CheckpointReader (gcr/store.h): one committed checkpoint, its packs opened up front
// under the shared gc.lock, then read without the lock (open packs survive gc).
#pragma once

#include <memory>

#include "gcr/store.h"
#include "store/store_state.h"

namespace gcr::store {

Result<std::unique_ptr<CheckpointReader>> make_checkpoint_reader(std::shared_ptr<StoreState> state,
                                                                 const CheckpointId& id);

}  // namespace gcr::store
