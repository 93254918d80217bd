// The store's CheckpointReader (gcr/store.h): one committed checkpoint, its packs opened up front
// under the shared gc.lock, then read without the lock (open packs survive gc).
#pragma once

#include <memory>

#include "gcr/store.h"
#include "store/store_state.h"

namespace gcr::store {

// arriving: the checkpoint may still be arriving (incoming.h): its manifest may be incoming/'s,
// and a chunk not yet in a sealed pack is waited for when read.
Result<std::unique_ptr<CheckpointReader>> make_checkpoint_reader(std::shared_ptr<StoreState> state,
                                                                 const CheckpointId& id,
                                                                 bool arriving = false);

}  // namespace gcr::store
