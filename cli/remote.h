// Remote stores from the command line (gcr/store_backend.h, gcr/store_transfer.h): `gcr image
// push/pull`, and what `gcr checkpoint` and `gcr restore` do around gcrd when the store is a
// bucket. gcrd only ever opens local directories: a checkpoint into s3://… is written by gcrd into
// the bucket's local cache store, then uploaded from here (new chunks only); a restore from s3://…
// pulls the checkpoint into that cache store (missing chunks only), then gcrd restores from it.
// The transfers run in this process, with the caller's credentials.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "context.h"
#include "gcr/store_backend.h"
#include "gcr/store_location.h"
#include "gcr/store_transfer.h"

namespace gcr::cli {

// GCR_CACHE_DIR, else the default (gcr/store_location.h).
std::filesystem::path cache_dir();

// Opens a store location; a bucket's cache directory comes with it.
Result<std::unique_ptr<store::Backend>> open_location(const store::StoreLocation& location,
                                                      bool create);

// The local store that stands in for `remote` on this machine (its cache store).
std::filesystem::path cache_store_of(const store::Backend& remote);

// Uploads checkpoint `id` from the cache store to `remote`, tagging it `tag` there.
// Both show a progress line on a terminal (`progress`: whether to; the label says what moves).
Result<store::TransferReport> push_from_cache(store::Backend& remote, const std::string& id_hex,
                                              std::optional<std::string> tag, bool progress);

// Downloads checkpoint `name` of `remote` into its cache store; returns the checkpoint id.
Result<store::TransferReport> pull_into_cache(store::Backend& remote, std::string_view name,
                                              bool progress);

// Keeps the cache store within GCR_CACHE_MAX_BYTES (gcr/remote_cache.h); problems are warnings.
void trim_cache(const std::filesystem::path& cache_store, const store::CheckpointId& keep);

}  // namespace gcr::cli
