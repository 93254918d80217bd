// The local cache of remote stores (GCR_CACHE_DIR, gcr/store_location.h). Each bucket location
// has a directory of its own, named by a hash of endpoint, bucket and prefix:
//
//   <cache>/s3/<16 hex>/location   the endpoint and location, for people reading the cache
//                      /idx/       pack indexes read from the bucket (immutable, so never stale)
//                      /store/     a local store (docs/image-format.md): checkpoints are written
//                                  here by gcrd before they are pushed, and pulled here before
//                                  gcrd restores them, so a node reads each chunk from the network
//                                  once
//
// The store is bounded: trim_cache_store removes the least recently used checkpoints (by their
// manifest's mtime, touched on every use) until its packs fit, then collects their chunks.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>

#include "gcr/chunk_id.h"
#include "gcr/result.h"
#include "gcr/store_location.h"

namespace gcr::store {

std::filesystem::path remote_cache_dir(const std::filesystem::path& cache_dir,
                                       std::string_view endpoint, const StoreLocation& location);

// Marks a checkpoint of the cache store as just used (its manifest's mtime).
void touch_cached_checkpoint(const std::filesystem::path& store, const CheckpointId& id);

// Removes least recently used checkpoints other than `keep` until the store's pack files take at
// most max_bytes, then runs gc. Returns how many checkpoints it removed.
Result<std::uint64_t> trim_cache_store(const std::filesystem::path& store, std::uint64_t max_bytes,
                                       const CheckpointId& keep);

}  // namespace gcr::store
