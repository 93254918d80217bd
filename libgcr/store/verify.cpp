// verify: see verify.h. Holds gc.lock shared throughout, so that gc cannot delete a pack under it
// and make sound data look lost. It trusts nothing cached: pack indexes are loaded afresh (the
// store's catalog keeps indexes as they were when first loaded). Each distinct chunk is read once;
// a bad one is reported for every (checkpoint, object) naming it.
#include "store/verify.h"

#include <map>
#include <unordered_map>

#include "store/fetch.h"
#include "store/gc_lock.h"
#include "store/hash.h"
#include "store/manifests.h"

namespace gcr::store {
namespace {

constexpr std::uint64_t kVerifyWindow = 64ull << 20;

struct Ref {
  std::size_t checkpoint;  // index into labels
  std::string object;
};

}  // namespace

Result<VerifyReport> verify_store(
    StoreState& state, std::optional<CheckpointId> only,
    const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  const Layout& layout = state.layout;
  GCR_TRY_ASSIGN(GcLock lock, GcLock::shared(layout.gc_lock()));
  PackCatalog catalog(layout);
  GCR_TRY(catalog.refresh());
  VerifyReport report;

  std::vector<CheckpointId> ids;
  if (only) {
    ids.push_back(*only);
  } else {
    GCR_TRY_ASSIGN(ids, list_checkpoint_ids(layout));
    for (const auto& [pack, what] : catalog.problems()) {
      report.problems.push_back({"", "pack " + pack.hex(), "", what});
    }
  }
  std::map<CheckpointId, std::vector<std::string>> tags_of;
  if (auto tags = read_tags(layout)) {
    for (const auto& [name, id] : *tags) tags_of[id].push_back(name);
  }

  std::vector<std::string> labels;
  std::unordered_map<ChunkId, std::vector<Ref>, Id128Hash> refs;
  std::vector<ChunkRef> unique;  // non-zero chunks to read, first reference order
  for (const CheckpointId& id : ids) {
    std::string label = checkpoint_label(id, tags_of[id]);
    auto m = load_manifest(layout, id);
    if (!m) {
      if (only) return std::move(m).error();
      report.problems.push_back({label, "", "", m.error().message});
      continue;
    }
    ++report.checkpoints;
    labels.push_back(label);
    for (const ObjectEntry& o : m->objects) {
      for (std::uint64_t k = 0; k < o.chunk_count; ++k) {
        const ChunkRef& c = m->chunks[o.first_chunk + k];
        if (c.zero) {
          if (c.id != zero_chunk_id(c.raw_bytes)) {
            report.problems.push_back({label, object_label(o), c.id.hex(),
                                       "marked as all zeros, but the id is not that of " +
                                           std::to_string(c.raw_bytes) + " zero bytes"});
          }
          continue;
        }
        auto& r = refs[c.id];
        if (r.empty()) unique.push_back(c);
        if (r.empty() || r.back().checkpoint != labels.size() - 1 ||
            r.back().object != object_label(o)) {
          r.push_back(Ref{labels.size() - 1, object_label(o)});
        }
      }
    }
  }

  auto report_bad = [&](const ChunkId& id, const std::string& what) {
    for (const Ref& r : refs[id]) {
      report.problems.push_back({labels[r.checkpoint], r.object, id.hex(), what});
    }
  };

  std::uint64_t total = 0, done = 0;
  for (const ChunkRef& c : unique) total += c.raw_bytes;
  std::map<PackId, Result<std::shared_ptr<PackReader>>> packs;
  auto io = state.new_io();
  std::vector<std::vector<std::byte>> buffers;
  std::vector<FetchItem> items;
  for (std::size_t at = 0; at < unique.size();) {
    items.clear();
    buffers.clear();
    std::uint64_t bytes = 0;
    std::size_t first = at;
    while (at < unique.size() && (at == first || bytes + unique[at].raw_bytes <= kVerifyWindow)) {
      const ChunkRef& c = unique[at++];
      bytes += c.raw_bytes;
      auto loc = catalog.find(c.id);
      if (!loc) {
        report_bad(c.id, "in no sealed pack (lost, or its pack index is damaged)");
        continue;
      }
      auto it = packs.find(loc->pack);
      if (it == packs.end())
        it = packs.emplace(loc->pack, PackReader::open(layout, loc->pack, loc->pack_bytes)).first;
      if (!it->second) {
        report_bad(c.id, it->second.error().message);
        continue;
      }
      FetchItem item;
      item.id = c.id;
      item.raw_bytes = c.raw_bytes;
      item.pack = it->second->get();
      item.entry = loc->entry;
      item.out = buffers.emplace_back(c.raw_bytes);
      items.push_back(std::move(item));
    }
    GCR_TRY(fetch_chunks(*io, state.pool, items));
    for (const FetchItem& item : items) {
      ++report.chunks;
      report.bytes += item.raw_bytes;
      if (!item.result) report_bad(item.id, item.result.error().message);
    }
    done += bytes;
    if (progress) progress(done, total);
  }
  return report;
}

}  // namespace gcr::store
