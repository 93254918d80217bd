// Usage of a Backend store: see bucket_usage.h.
#include "gcr/bucket_usage.h"

#include <algorithm>
#include <map>
#include <unordered_set>

#include "gcr/manifest.h"
#include "gcr/store_workers.h"
#include "store/backend_chunks.h"
#include "store/layout.h"
#include "store/pack_format.h"
#include "store/usage.h"

namespace gcr::store {

Result<BackendUsage> backend_usage(Backend& store, std::optional<CheckpointId> id) {
  BackendUsage out;
  Usage& u = out.usage;
  if (id) {
    auto read = read_manifests(store, {*id});
    GCR_TRY_ASSIGN(Manifest m, std::move(read.front()));
    add_checkpoint_usage(u, m);
    if (auto it = m.stats.find("stored_bytes"); it != m.stats.end()) u.stored_bytes = it->second;
    return out;
  }
  GCR_TRY_ASSIGN(DirListing listing, store.list_detailed("packs"));
  std::unordered_set<PackId, Id128Hash> marked;
  std::vector<PackId> indexed;
  for (const auto& [p, objects] : pack_objects(listing)) {
    if (objects.index) indexed.push_back(p);
    if (objects.mark) marked.insert(p);
    if (!objects.pack) continue;
    ++out.packs;
    u.pack_file_bytes += objects.pack->bytes;
    if (objects.mark) out.marked_bytes += objects.pack->bytes;
  }
  order_for_reading(indexed, marked);

  GCR_TRY_ASSIGN(auto ids, list_manifest_ids(store));
  auto manifests = read_manifests(store, ids);
  std::unordered_set<ChunkId, Id128Hash> live;
  for (auto& m : manifests) {
    if (!m && transport_failure(m.error())) return std::move(m).error();
    if (!m) continue;  // verify reports it; usage counts what it can read
    add_checkpoint_usage(u, *m);
    for (const ChunkRef& c : m->chunks) {
      if (!c.zero) live.insert(c.id);
    }
  }

  auto indexes = load_indexes(store, indexed);
  std::uint64_t live_record_bytes = 0;
  std::unordered_set<ChunkId, Id128Hash> counted;
  for (auto& index : indexes) {  // in reading order: a reader's copy of a chunk is counted
    if (!index && transport_failure(index.error())) return std::move(index).error();
    if (index) live_record_bytes += add_live_pack_usage(u, *index, live, counted);
  }
  u.garbage_bytes =
      u.pack_file_bytes > live_record_bytes ? u.pack_file_bytes - live_record_bytes : 0;
  return out;
}

}  // namespace gcr::store
