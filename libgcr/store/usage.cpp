// usage: see usage.h. Per checkpoint, the dedup figures come from its CHUNKS (each chunk ref's
// class and size) and stored_bytes from its STATS (what it added to the packs). For the store,
// stored_bytes is what the packs hold for live chunks, one copy each; garbage is everything else
// in packs/ and tmp/ that gc would reclaim.
#include "store/usage.h"

#include <dirent.h>
#include <sys/stat.h>

#include <unordered_set>

#include "store/gc_lock.h"
#include "store/manifests.h"

namespace gcr::store {
namespace {}  // namespace

void add_checkpoint_usage(Usage& u, const Manifest& m) {
  ++u.checkpoints;
  for (const ObjectEntry& o : m.objects) u.logical_bytes += o.size;
  for (const ChunkRef& c : m.chunks) {
    ++u.chunks;
    switch (c.dedup) {
      case DedupClass::fresh:
        u.fresh_bytes += c.raw_bytes;
        break;
      case DedupClass::zero:
        u.zero_bytes += c.raw_bytes;
        break;
      case DedupClass::self:
        u.self_bytes += c.raw_bytes;
        break;
      case DedupClass::lineage:
        u.lineage_bytes += c.raw_bytes;
        break;
      case DedupClass::other:
        u.other_bytes += c.raw_bytes;
        break;
    }
  }
}

namespace {

std::uint64_t dir_bytes(const std::filesystem::path& dir, std::string_view ext) {
  std::uint64_t total = 0;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (!ext.empty() && !name.ends_with(ext)) continue;
    struct stat st {};
    if (::stat((dir / name).c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      total += static_cast<std::uint64_t>(st.st_size);
    }
  }
  ::closedir(d);
  return total;
}

}  // namespace

std::uint64_t add_live_pack_usage(Usage& u, const PackIndex& index,
                                  const std::unordered_set<ChunkId, Id128Hash>& live,
                                  std::unordered_set<ChunkId, Id128Hash>& counted) {
  std::uint64_t record_bytes = 0;
  for (const IndexEntry& e : index.entries) {
    if (live.contains(e.id) && counted.insert(e.id).second) {
      u.stored_bytes += e.stored_bytes;
      record_bytes += e.record_bytes();
    }
  }
  return record_bytes > 0 ? record_bytes + kPackHeaderBytes : 0;
}

Result<Usage> store_usage(StoreState& state, std::optional<CheckpointId> id) {
  const Layout& layout = state.layout;
  Usage u;
  if (id) {
    GCR_TRY_ASSIGN(Manifest m, load_manifest(layout, *id));
    add_checkpoint_usage(u, m);
    auto it = m.stats.find("stored_bytes");
    if (it != m.stats.end()) u.stored_bytes = it->second;
    return u;
  }
  GCR_TRY_ASSIGN(GcLock lock, GcLock::shared(layout.gc_lock()));
  GCR_TRY(state.catalog.refresh());
  std::unordered_set<ChunkId, Id128Hash> live;
  GCR_TRY_ASSIGN(auto ids, list_checkpoint_ids(layout));
  for (const CheckpointId& cid : ids) {
    auto m = load_manifest(layout, cid);
    if (!m) continue;  // verify reports it; usage counts what it can read
    add_checkpoint_usage(u, *m);
    for (const ChunkRef& c : m->chunks) {
      if (!c.zero) live.insert(c.id);
    }
  }
  u.pack_file_bytes = dir_bytes(layout.packs(), ".pack");
  std::uint64_t live_record_bytes = 0, sealed_bytes = 0;
  std::unordered_set<ChunkId, Id128Hash> counted;
  for (const auto& [pack_id, index] : state.catalog.packs()) {
    sealed_bytes += index->pack_bytes;
    live_record_bytes += add_live_pack_usage(u, *index, live, counted);
  }
  // Garbage: dead and duplicate records in sealed packs, unsealed packs, and tmp/.
  std::uint64_t unsealed_bytes =
      u.pack_file_bytes > sealed_bytes ? u.pack_file_bytes - sealed_bytes : 0;
  u.garbage_bytes = (sealed_bytes > live_record_bytes ? sealed_bytes - live_record_bytes : 0) +
                    unsealed_bytes + dir_bytes(layout.tmp(), "");
  return u;
}

}  // namespace gcr::store
