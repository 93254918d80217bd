// Listing the checkpoints of any store through its Backend (`gcr image ls` on a bucket): every
// manifest under manifests/, read and checked, with the tags that name it. A manifest that cannot
// be read is listed with meta "error", as Store::list does, so that it can be seen.
#pragma once

#include <vector>

#include "gcr/result.h"
#include "gcr/store.h"
#include "store/backend.h"

namespace gcr::store {

Result<std::vector<CheckpointInfo>> list_backend_checkpoints(Backend& store);

}  // namespace gcr::store
