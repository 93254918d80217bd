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
  auto read_manifest = [&](const CheckpointId& cid) -> Result<Manifest> {
    GCR_TRY_ASSIGN(auto bytes, store.get(manifest_key(cid), kMaxManifestBytes));
    return decode_manifest(bytes, "manifest " + cid.hex() + " (" + store.name() + ")");
  };
  if (id) {
    GCR_TRY_ASSIGN(Manifest m, read_manifest(*id));
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

  GCR_TRY_ASSIGN(auto names, store.list("manifests"));
  std::vector<CheckpointId> ids;
  for (const auto& n : names) {
    if (auto c = id_from_file_name(n, "manifest")) ids.push_back(*c);
  }
  std::vector<Result<Manifest>> manifests(ids.size(), Error{Errc::internal, "not read"});
  WorkerPool pool(std::min<unsigned>(store.parallelism(), std::max<std::size_t>(ids.size(), 1)));
  pool.parallel_for(ids.size(), [&](std::size_t i) { manifests[i] = read_manifest(ids[i]); });
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
      bool any_live = false;
      for (const IndexEntry& e : index->entries) {
        if (live.contains(e.id) && counted.insert(e.id).second) {
          u.stored_bytes += e.stored_bytes;
          live_record_bytes += e.record_bytes();
          any_live = true;
        }
      }
      if (any_live) live_record_bytes += kPackHeaderBytes;
    }
  }
  u.garbage_bytes =
      u.pack_file_bytes > live_record_bytes ? u.pack_file_bytes - live_record_bytes : 0;
  return out;
}

}  // namespace gcr::store
