// verify of a store through its Backend (`gcr image verify` on a bucket): every manifest (or one)
// read and decoded, every pack index read afresh (not from the local cache), every chunk a
// checkpoint names found in a sealed pack and its record read back with ranged GETs, several at
// once, and checked (record header, codec, XXH3-128 against the chunk id). Each distinct chunk is
// read once; a bad one is reported for every (checkpoint, object) naming it, as the local verify
// (verify.h) does. Packs gc has marked are read like any other: a checkpoint may name one.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "gcr/store.h"
#include "gcr/store_backend.h"

namespace gcr::store {

Result<VerifyReport> verify_backend(
    Backend& store, std::optional<CheckpointId> only,
    const std::function<void(std::uint64_t done, std::uint64_t total)>& progress);

}  // namespace gcr::store
