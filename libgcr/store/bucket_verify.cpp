// verify of a Backend store: see bucket_verify.h.
#include "gcr/bucket_verify.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "gcr/manifest.h"
#include "gcr/store_backend_list.h"
#include "gcr/store_transfer.h"
#include "gcr/store_workers.h"
#include "store/backend_chunks.h"
#include "store/layout.h"
#include "store/manifests.h"

namespace gcr::store {
namespace {

struct Ref {
  std::size_t checkpoint;  // index into labels
  std::string object;
};

}  // namespace

Result<VerifyReport> verify_backend(
    Backend& store, std::optional<CheckpointId> only,
    const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  VerifyReport report;
  std::vector<CheckpointId> ids;
  if (only) {
    ids.push_back(*only);
  } else {
    GCR_TRY_ASSIGN(ids, list_manifest_ids(store));
  }
  GCR_TRY_ASSIGN(auto tags_of, read_backend_tags(store));

  // Indexes afresh: the cache holds an index as it was first read.
  GCR_TRY_ASSIGN(BackendPacks packs, list_packs(store));
  std::vector<PackId> indexed(packs.indexed.begin(), packs.indexed.end());
  order_for_reading(indexed, packs.marked);
  auto indexes = load_indexes(store, indexed, IndexCache::bypass);
  ChunkMap where;  // as a reader finds chunks (order_for_reading)
  for (std::size_t i = 0; i < indexed.size(); ++i) {
    if (!indexes[i] && transport_failure(indexes[i].error())) {
      return std::move(indexes[i]).error();
    }
    if (!indexes[i]) {
      if (!only)
        report.problems.push_back({"", "pack " + indexed[i].hex(), "", indexes[i].error().message});
      continue;
    }
    for (const IndexEntry& e : indexes[i]->entries) where.emplace(e.id, Located{indexed[i], e});
  }

  std::vector<std::string> labels;
  std::unordered_map<ChunkId, std::vector<Ref>, Id128Hash> refs;
  std::vector<Located> to_read;
  std::uint64_t total = 0;
  auto report_bad = [&](const ChunkId& id, const std::string& what) {
    for (const Ref& r : refs[id]) {
      report.problems.push_back({labels[r.checkpoint], r.object, id.hex(), what});
    }
  };
  auto manifests = read_manifests(store, ids);
  for (std::size_t k = 0; k < ids.size(); ++k) {
    const CheckpointId& id = ids[k];
    std::string label = checkpoint_label(id, tags_of[id]);
    Result<Manifest>& m = manifests[k];
    if (!m) {
      if (only || transport_failure(m.error())) return std::move(m).error();
      if (m.error().code == Errc::not_found) continue;  // removed meanwhile
      report.problems.push_back({label, "", "", m.error().message});
      continue;
    }
    ++report.checkpoints;
    labels.push_back(label);
    for (const ObjectEntry& o : m->objects) {
      for (std::uint64_t k = 0; k < o.chunk_count && o.first_chunk + k < m->chunks.size(); ++k) {
        const ChunkRef& c = m->chunks[o.first_chunk + k];
        if (c.zero) continue;  // decode_manifest checked their ids
        auto& r = refs[c.id];
        bool first = r.empty();
        if (first || r.back().checkpoint != labels.size() - 1 ||
            r.back().object != object_label(o)) {
          r.push_back(Ref{labels.size() - 1, object_label(o)});
        }
        if (!first) continue;
        auto at = where.find(c.id);
        if (at == where.end()) continue;  // reported below, once every reference is known
        to_read.push_back(at->second);
        total += c.raw_bytes;
      }
    }
  }
  for (const auto& [id, r] : refs) {
    if (!where.contains(id))
      report_bad(id, "in no sealed pack (lost, or its pack index is damaged)");
  }

  sort_by_place(to_read);
  std::vector<RecordRange> ranges;
  const TransferOptions reads;  // a transfer's ranged reads
  for (const Located& l : to_read)
    add_to_ranges(ranges, l, reads.max_range_bytes, reads.max_range_gap_bytes);
  std::mutex mu;
  std::atomic<std::uint64_t> done{0};
  std::optional<Error> stop;
  WorkerPool pool(std::min<unsigned>(store.parallelism(), std::max<std::size_t>(ranges.size(), 1)));
  pool.parallel_for(ranges.size(), [&](std::size_t i) {
    const RecordRange& r = ranges[i];
    std::vector<std::byte> buffer(r.bytes);
    Status got = store.get_range(pack_key(r.pack), r.offset, buffer);
    std::string origin = "pack " + r.pack.hex() + " (" + store.name() + ")";
    std::uint64_t raw = 0;
    std::lock_guard lock(mu);
    if (!got && transport_failure(got.error())) {
      if (!stop) stop = got.error();
      return;
    }
    for (const Located& l : r.records) {
      raw += l.entry.raw_bytes;
      ++report.chunks;
      report.bytes += l.entry.raw_bytes;
      if (!got) {
        report_bad(l.entry.id, got.error().message);
        continue;
      }
      auto record = std::span<const std::byte>(buffer).subspan(l.entry.offset - r.offset,
                                                               l.entry.record_bytes());
      if (Status s = check_record(record, l, origin); !s) report_bad(l.entry.id, s.error().message);
    }
    if (progress) progress(done += raw, total);
  });
  if (stop) return *stop;
  return report;
}

}  // namespace gcr::store
