// PackCatalog: which sealed pack holds each chunk, built from the packs' indexes and kept by the
// Store for all its writers and readers. Sealed packs are immutable, so a loaded index stays right
// for as long as its pack exists; refresh() adds packs sealed since and forgets packs gc deleted.
// Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include "gcr/chunk_id.h"
#include "gcr/result.h"
#include "store/layout.h"
#include "store/pack_format.h"

namespace gcr::store {

struct ChunkLocation {
  PackId pack;
  std::uint64_t pack_bytes = 0;  // the pack's size when sealed
  IndexEntry entry;
};

// Reads and checks packs/<id>.idx (its pack id must be the file's).
Result<PackIndex> load_pack_index(const Layout& layout, const PackId& id);
// Ids of the sealed packs (those with an .idx) and of all .pack files in packs/.
struct PackListing {
  std::vector<PackId> sealed, packs;
};
Result<PackListing> list_packs(const Layout& layout);

class PackCatalog {
 public:
  explicit PackCatalog(Layout layout) : layout_(std::move(layout)) {}

  // Brings the catalog up to the sealed packs now in packs/. Call with gc.lock held (shared or
  // exclusive), so that gc cannot delete packs halfway. An index that fails to load is left out
  // (its chunks count as absent) and listed by problems().
  Status refresh();

  std::optional<ChunkLocation> find(const ChunkId& id) const;
  bool contains(const ChunkId& id) const;
  std::map<PackId, std::shared_ptr<const PackIndex>> packs() const;
  std::size_t pack_count() const;
  std::map<PackId, std::string> problems() const;

  // A pack this process has just sealed.
  void add(std::shared_ptr<const PackIndex> index);

 private:
  void insert_locked(const std::shared_ptr<const PackIndex>& index);

  Layout layout_;
  mutable std::shared_mutex mu_;
  std::map<PackId, std::shared_ptr<const PackIndex>> packs_;
  struct Where {
    const PackIndex* index;
    std::size_t entry;
  };
  std::unordered_map<ChunkId, Where, Id128Hash> chunks_;
  std::map<PackId, std::string> problems_;
};

}  // namespace gcr::store
