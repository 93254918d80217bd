// gc of a bucket store: see bucket_gc.h (Note [Bucket gc and writers]).
#include "gcr/bucket_gc.h"

#include <algorithm>
#include <map>
#include <unordered_set>
#include <vector>

#include "gcr/manifest.h"
#include "gcr/store_workers.h"
#include "store/backend_chunks.h"
#include "store/layout.h"

namespace gcr::store {
namespace {

// Every chunk some committed manifest names. A manifest that cannot be read stops gc: it cannot
// know what that checkpoint needs (one removed meanwhile is simply gone).
Result<std::unordered_set<ChunkId, Id128Hash>> named_chunks(Backend& store) {
  GCR_TRY_ASSIGN(auto ids, list_manifest_ids(store));
  auto read = read_manifests(store, ids);
  std::unordered_set<ChunkId, Id128Hash> named;
  for (auto& m : read) {
    if (!m && m.error().code == Errc::not_found) continue;
    if (!m) {
      Error e = std::move(m).error();
      e.message = "gc deletes nothing while a checkpoint cannot be read: " + e.message;
      return e;
    }
    for (const ChunkRef& c : m->chunks) {
      if (!c.zero) named.insert(c.id);
    }
  }
  return named;
}

Status one_pass(Backend& store, const BucketGcOptions& options, BucketGcReport& report) {
  // The listing first, the manifests after: a mark seen old here was written before every
  // manifest read below (bucket_gc.h).
  GCR_TRY_ASSIGN(DirListing listing, store.list_detailed("packs"));
  std::map<PackId, PackObjects> packs = pack_objects(listing);
  GCR_TRY_ASSIGN(auto named, named_chunks(store));

  std::vector<PackId> indexed;
  for (const auto& [id, objects] : packs) {
    if (objects.index) indexed.push_back(id);
  }
  auto indexes = load_indexes(store, indexed);
  // A chunk is kept by the unmarked packs holding it; only where none does are marked packs
  // holding it needed (and unmarked again). So a pack a writer copied again, because it found
  // the chunks in a marked one, frees the marked one.
  std::unordered_set<ChunkId, Id128Hash> in_unmarked;
  for (std::size_t i = 0; i < indexed.size(); ++i) {
    if (!indexes[i] || packs[indexed[i]].mark) continue;
    for (const IndexEntry& e : indexes[i]->entries) {
      if (named.contains(e.id)) in_unmarked.insert(e.id);
    }
  }
  std::unordered_set<PackId, Id128Hash> used;
  for (std::size_t i = 0; i < indexed.size(); ++i) {
    Result<PackIndex>& index = indexes[i];
    if (!index && transport_failure(index.error())) return std::move(index).error();
    if (!index) {
      used.insert(indexed[i]);  // unreadable: kept for 'gcr image verify' to report
      continue;
    }
    bool marked = packs[indexed[i]].mark != nullptr;
    for (const IndexEntry& e : index->entries) {
      if (named.contains(e.id) && (!marked || !in_unmarked.contains(e.id))) {
        used.insert(indexed[i]);
        break;
      }
    }
  }

  auto old_enough = [&](std::int64_t written) {
    return listing.now_unix - written >= options.grace_seconds;
  };
  ++report.passes;
  report.packs = packs.size();
  for (const auto& [id, objects] : packs) {
    bool is_used = used.contains(id);
    if (is_used) {
      if (objects.mark) {
        ++report.packs_unmarked;
        if (!options.dry_run) GCR_TRY(store.remove(mark_key(id)));
      }
      continue;
    }
    if (objects.mark && old_enough(objects.mark->modified_unix)) {
      ++report.packs_deleted;
      report.bytes_freed += objects.bytes();
      if (options.dry_run) continue;
      // The index first: a crash after it leaves a pack no reader can find, still marked.
      if (objects.index) GCR_TRY(store.remove(index_key(id)));
      if (objects.pack) GCR_TRY(store.remove(pack_key(id)));
      GCR_TRY(store.remove(mark_key(id)));
      continue;
    }
    if (!objects.mark && old_enough(objects.last_written())) {
      ++report.packs_marked;
      report.bytes_waiting += objects.bytes();
      if (options.dry_run) continue;
      Status s = store.put(mark_key(id), {}, PutMode::create_only);
      if (!s && s.error().code != Errc::already_exists) return s;
      continue;
    }
    ++report.packs_waiting;
    if (objects.mark) report.bytes_waiting += objects.bytes();
  }
  return ok();
}

}  // namespace

Result<BucketGcReport> collect_bucket_garbage(Backend& store, const BucketGcOptions& options) {
  if (options.grace_seconds < 0) {
    return make_error(Errc::invalid_argument, "the grace period cannot be negative");
  }
  BucketGcReport report;
  GCR_TRY(one_pass(store, options, report));
  if (options.grace_seconds == 0 && report.packs_marked > 0 && !options.dry_run) {
    BucketGcReport second;
    GCR_TRY(one_pass(store, options, second));
    report.packs_deleted += second.packs_deleted;
    report.bytes_freed += second.bytes_freed;
    report.bytes_waiting = second.bytes_waiting;
    report.packs_waiting = second.packs_waiting;
    report.packs_unmarked += second.packs_unmarked;
    report.packs_marked = std::max<std::uint64_t>(report.packs_marked, second.packs_marked);
    ++report.passes;
  }
  return report;
}

}  // namespace gcr::store
