// Backend: the objects of one store, wherever it lives (docs/image-format.md §8). A store is the
// same few kinds of immutable objects in either home — STORE, packs/<P>.pack, packs/<P>.idx,
// manifests/<C>.manifest, tags/<name> — named by the same store-relative keys:
//
//   backend_dir.cpp  a local directory, today's layout: files, written via tmp/ + fsync + rename
//   backend_s3.cpp   an S3-compatible bucket under a prefix: objects, over HTTP (s3_client.h)
//
// A checkpoint is committed by one create-only write of its manifest (rename locally, PUT with
// If-None-Match: * on a bucket); everything it names is written, and complete, before. Moving
// checkpoints between backends is store_transfer.h's. The local store's own writer and reader
// (checkpoint_writer.cpp, checkpoint_reader.cpp) work on the directory directly.
//
// Thread-safety: every method may be called from several threads at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gcr/result.h"
#include "gcr/store_location.h"

namespace gcr::store {

enum class PutMode {
  replace,      // tags
  create_only,  // everything else: already_exists when the key exists (the commit point)
};

// An object listed with what gc ages it by.
struct ObjectInfo {
  std::string name;  // under the listed directory
  std::uint64_t bytes = 0;
  std::int64_t modified_unix = 0;  // last written, by the store's clock
};

struct DirListing {
  std::vector<ObjectInfo> objects;
  std::int64_t now_unix = 0;  // the store's clock when it listed (a bucket's: the endpoint's)
};

// An object and the version it was read at, for a later put_if.
struct Versioned {
  std::vector<std::byte> bytes;
  std::string version;  // opaque: a bucket's ETag, a file's content hash
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "s3://bucket/prefix" or "/path/to/store", for messages.
  virtual const std::string& name() const = 0;
  // Names of the objects directly under `dir` ("packs", "manifests", "tags"), unordered; names
  // that are not store names may be among them (callers check).
  virtual Result<std::vector<std::string>> list(const std::string& dir) = 0;
  // As list, with sizes and times, and the store's clock to age them against (bucket gc).
  virtual Result<DirListing> list_detailed(const std::string& dir) = 0;
  // A whole object, refusing one larger than max_bytes; not_found when absent.
  virtual Result<std::vector<std::byte>> get(const std::string& key, std::uint64_t max_bytes) = 0;
  // [offset, offset + out.size()) of an object, exactly.
  virtual Status get_range(const std::string& key, std::uint64_t offset,
                           std::span<std::byte> out) = 0;
  // Writes a whole object; durable when it returns. create_only: already_exists when present.
  virtual Status put(const std::string& key, std::span<const std::byte> bytes, PutMode mode) = 0;
  // put of the concatenation of `parts`. This one joins them first; a backend that can write
  // them where they are (a directory: each part written in turn) spares that copy.
  virtual Status put_parts(const std::string& key,
                           std::span<const std::span<const std::byte>> parts, PutMode mode) {
    std::vector<std::byte> joined;
    for (std::span<const std::byte> p : parts) joined.insert(joined.end(), p.begin(), p.end());
    return put(key, joined, mode);
  }
  // The object and its version; not_found when absent.
  virtual Result<Versioned> get_versioned(const std::string& key, std::uint64_t max_bytes) = 0;
  // Writes an object only if it is still at `version` (empty: still absent): a compare-and-swap
  // (tags). busy when another writer changed it since it was read.
  virtual Status put_if(const std::string& key, std::span<const std::byte> bytes,
                        const std::string& version) = 0;
  // Deletes an object; absent is not an error.
  virtual Status remove(const std::string& key) = 0;
  // How many requests are worth having in flight at once.
  virtual unsigned parallelism() const = 0;
  // A remote store's own directory in the local cache (remote_cache.h); empty for a local store.
  virtual std::filesystem::path local_cache() const { return {}; }
};

struct BackendOptions {
  bool create = false;  // make the store when missing (the STORE marker, once, even under races)
  // S3: gcr's cache directory (remote_cache.h), or empty for none.
  std::filesystem::path cache_dir;
};

// A local store directory (made when create and missing; gc.lock held shared while open, so gc
// waits for a transfer into it).
Result<std::unique_ptr<Backend>> open_dir_backend(const std::filesystem::path& root,
                                                  const BackendOptions& options);
// An S3 store (backend_s3.cpp): credentials and endpoint from the environment and ~/.aws.
// Refuses a bucket that does not honour conditional writes.
Result<std::unique_ptr<Backend>> open_s3_backend(const StoreLocation& location,
                                                 const BackendOptions& options);

// Either, by location.
Result<std::unique_ptr<Backend>> open_backend(const StoreLocation& location,
                                              const BackendOptions& options);

}  // namespace gcr::store
