// The checkpoints of any store through its Backend (`gcr image ls` and `rm` on a bucket): every
// manifest under manifests/, read and checked, with the tags that name it. A manifest that cannot
// be read is listed with meta "error", as Store::list does, so that it can be seen.
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gcr/result.h"
#include "gcr/store.h"
#include "gcr/store_backend.h"

namespace gcr::store {

Result<std::vector<CheckpointInfo>> list_backend_checkpoints(Backend& store);

// checkpoint id -> the tags naming it (sorted), for every readable tag.
Result<std::map<CheckpointId, std::vector<std::string>>> read_backend_tags(Backend& store);

// The checkpoint a tag object names ("<32 hex digits>\n"), or nullopt when it is not one.
std::optional<CheckpointId> tag_target(std::span<const std::byte> bytes);

// Removes a checkpoint: its manifest, then each tag still naming it (a tag is checked just
// before it goes; RGW ignores If-Match on DELETE, so a tag moved in that instant is lost).
// Returns the tags removed.
Result<std::vector<std::string>> remove_backend_checkpoint(Backend& store, const CheckpointId& id);

}  // namespace gcr::store
