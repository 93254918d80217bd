// Usage of a Backend store: see bucket_usage.h.
#include "store/bucket_usage.h"

#include <algorithm>
#include <map>
#include <unordered_set>

#include "gcr/manifest.h"
#include "store/backend_chunks.h"
#include "store/layout.h"
#include "store/pack_format.h"
#include "store/usage.h"
#include "store/workers.h"

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
  std::map<PackId, std::uint64_t> pack_bytes;
  std::unordered_set<PackId, Id128Hash> marked;
  std::vector<PackId> indexed;
  for (const ObjectInfo& o : listing.objects) {
    if (auto p = id_from_file_name(o.name, "pack")) pack_bytes[*p] = o.bytes;
    if (auto p = id_from_file_name(o.name, "idx")) indexed.push_back(*p);
    if (auto p = id_from_file_name(o.name, "dead")) marked.insert(*p);
  }
  std::sort(indexed.begin(), indexed.end());
  out.packs = pack_bytes.size();
  for (const auto& [p, bytes] : pack_bytes) {
    u.pack_file_bytes += bytes;
    if (marked.contains(p)) out.marked_bytes += bytes;
  }

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
  // Unmarked packs first: their copy of a chunk is the one that stays (backend_chunks.h).
  for (bool want_marked : {false, true}) {
    for (std::size_t i = 0; i < indexed.size(); ++i) {
      auto& index = indexes[i];
      if (!index && transport_failure(index.error())) return std::move(index).error();
      if (!index || marked.contains(indexed[i]) != want_marked) continue;
      live_record_bytes += add_live_pack_usage(u, *index, live, counted);
    }
  }
  u.garbage_bytes =
      u.pack_file_bytes > live_record_bytes ? u.pack_file_bytes - live_record_bytes : 0;
  return out;
}

}  // namespace gcr::store
