// The chunks of a Backend store: see backend_chunks.h.
#include "store/backend_chunks.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "gcr/store.h"
#include "gcr/store_workers.h"
#include "store/compress.h"
#include "store/layout.h"

namespace gcr::store {

std::string index_key(const PackId& p) {
  return "packs/" + p.hex() + ".idx";
}
std::string pack_key(const PackId& p) {
  return "packs/" + p.hex() + ".pack";
}
std::string mark_key(const PackId& p) {
  return "packs/" + p.hex() + ".dead";
}
std::string manifest_key(const CheckpointId& c) {
  return "manifests/" + c.hex() + ".manifest";
}

Result<BackendPacks> list_packs(Backend& store) {
  GCR_TRY_ASSIGN(auto names, store.list("packs"));
  BackendPacks out;
  for (const auto& n : names) {
    if (auto id = id_from_file_name(n, "idx")) out.indexed.insert(*id);
    if (auto id = id_from_file_name(n, "dead")) out.marked.insert(*id);
  }
  return out;
}

std::vector<Result<PackIndex>> load_indexes(Backend& store, const std::vector<PackId>& ids,
                                            IndexCache cache) {
  std::vector<Result<PackIndex>> loaded(ids.size(), Error{Errc::internal, "not loaded"});
  WorkerPool pool(std::min<unsigned>(store.parallelism(), std::max<std::size_t>(ids.size(), 1)));
  pool.parallel_for(ids.size(), [&](std::size_t i) {
    Result<std::vector<std::byte>> bytes = std::vector<std::byte>{};
    if (cache == IndexCache::use) {
      bytes = store.get(index_key(ids[i]), kMaxIndexBytes);
    } else if (auto v = store.get_versioned(index_key(ids[i]), kMaxIndexBytes)) {
      bytes = std::move(v->bytes);  // get_versioned goes to the store, past a bucket's cache
    } else {
      bytes = std::move(v).error();
    }
    if (!bytes) {
      loaded[i] = std::move(bytes).error();
      return;
    }
    std::string origin = "pack index " + ids[i].hex() + " (" + store.name() + ")";
    auto index = decode_pack_index(*bytes, origin);
    if (index && index->pack != ids[i]) {
      loaded[i] = Error{Errc::corrupt_image, origin + ": names pack " + index->pack.hex()};
    } else {
      loaded[i] = std::move(index);
    }
  });
  return loaded;
}

bool transport_failure(const Error& e) {
  return e.code == Errc::unreachable || e.code == Errc::permission_denied ||
         e.code == Errc::clock_skew || e.code == Errc::timeout;
}

Result<std::vector<CheckpointId>> list_manifest_ids(Backend& store) {
  GCR_TRY_ASSIGN(auto names, store.list("manifests"));
  std::vector<CheckpointId> ids;
  for (const auto& n : names) {
    if (auto id = id_from_file_name(n, "manifest")) ids.push_back(*id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::vector<Result<Manifest>> read_manifests(Backend& store, const std::vector<CheckpointId>& ids) {
  std::vector<Result<Manifest>> read(ids.size(), Error{Errc::internal, "not read"});
  WorkerPool pool(std::min<unsigned>(store.parallelism(), std::max<std::size_t>(ids.size(), 1)));
  pool.parallel_for(ids.size(), [&](std::size_t i) {
    std::string origin = "manifest " + ids[i].hex() + " (" + store.name() + ")";
    auto bytes = store.get(manifest_key(ids[i]), kMaxManifestBytes);
    if (!bytes) {
      read[i] = std::move(bytes).error();
      return;
    }
    auto m = decode_manifest(*bytes, origin);
    if (m && m->id != ids[i]) {
      read[i] = Error{Errc::corrupt_image, origin + ": holds checkpoint " + m->id.hex()};
    } else {
      read[i] = std::move(m);
    }
  });
  return read;
}

Result<ChunkMap> load_chunk_map(Backend& store, MarkedPacks marked) {
  GCR_TRY_ASSIGN(BackendPacks packs, list_packs(store));
  std::vector<PackId> ids;
  for (const PackId& id : packs.indexed) {
    if (marked == MarkedPacks::use || !packs.marked.contains(id)) ids.push_back(id);
  }
  order_for_reading(ids, packs.marked);
  auto loaded = load_indexes(store, ids);
  ChunkMap map;
  for (auto& index : loaded) {
    // Transport failures are not damage: the listing is incomplete, so stop.
    if (!index && transport_failure(index.error())) return std::move(index).error();
    if (!index) continue;
    for (const IndexEntry& e : index->entries) map.emplace(e.id, Located{index->pack, e});
  }
  return map;
}

std::map<PackId, PackObjects> pack_objects(const DirListing& packs_dir) {
  std::map<PackId, PackObjects> packs;
  for (const ObjectInfo& o : packs_dir.objects) {
    if (auto id = id_from_file_name(o.name, "pack")) packs[*id].pack = &o;
    if (auto id = id_from_file_name(o.name, "idx")) packs[*id].index = &o;
    if (auto id = id_from_file_name(o.name, "dead")) packs[*id].mark = &o;
  }
  return packs;
}

void order_for_reading(std::vector<PackId>& packs,
                       const std::unordered_set<PackId, Id128Hash>& marked) {
  std::sort(packs.begin(), packs.end());
  std::stable_partition(packs.begin(), packs.end(),
                        [&](const PackId& p) { return !marked.contains(p); });
}

void sort_by_place(std::vector<Located>& records) {
  std::sort(records.begin(), records.end(), [](const Located& a, const Located& b) {
    return a.pack != b.pack ? a.pack < b.pack : a.entry.offset < b.entry.offset;
  });
}

void add_to_ranges(std::vector<RecordRange>& ranges, const Located& l, std::uint64_t max_bytes,
                   std::uint64_t max_gap) {
  std::uint64_t rec = l.entry.record_bytes();
  bool extend = !ranges.empty() && ranges.back().pack == l.pack &&
                l.entry.offset >= ranges.back().offset + ranges.back().bytes &&
                l.entry.offset - (ranges.back().offset + ranges.back().bytes) <= max_gap &&
                l.entry.offset + rec - ranges.back().offset <= max_bytes;
  if (extend) {
    ranges.back().bytes = l.entry.offset + rec - ranges.back().offset;
  } else {
    ranges.push_back(RecordRange{l.pack, l.entry.offset, rec, {}});
  }
  ranges.back().records.push_back(l);
}

Status check_record(std::span<const std::byte> record, const Located& at,
                    const std::string& origin) {
  const IndexEntry& e = at.entry;
  GCR_TRY(check_record_header(record.first(kRecordHeaderBytes), e, origin));
  auto payload = record.subspan(kRecordHeaderBytes, e.stored_bytes);
  std::vector<std::byte> decoded;
  std::span<const std::byte> raw = payload;
  if (e.codec != Codec::raw) {
    decoded.resize(e.raw_bytes);
    Status s = unpack_chunk(e.codec, payload, decoded);
    if (!s) {
      return make_error(Errc::corrupt_image, origin + " offset " + std::to_string(e.offset) +
                                                 ": chunk " + e.id.hex() + ": " +
                                                 s.error().message);
    }
    raw = decoded;
  }
  if (chunk_id_of(raw) != e.id) {
    return make_error(Errc::corrupt_image, origin + " offset " + std::to_string(e.offset) +
                                               ": checksum mismatch for chunk " + e.id.hex());
  }
  return ok();
}

}  // namespace gcr::store
