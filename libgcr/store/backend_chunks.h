// The chunks of a store seen through its Backend (gcr/store_backend.h), for transfers, bucket gc
// and bucket verify: the object keys of packs, indexes, gc's marks and manifests; which packs are
// sealed and which gc has marked; every chunk the sealed packs hold (their indexes read in
// parallel); and the check of one record read back (header against the index, codec, XXH3-128
// against the chunk id).
#pragma once

#include <algorithm>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "gcr/chunk_id.h"
#include "gcr/manifest.h"
#include "gcr/result.h"
#include "gcr/store_backend.h"
#include "store/pack_format.h"

namespace gcr::store {

std::string index_key(const PackId& p);  // packs/<P>.idx
std::string pack_key(const PackId& p);   // packs/<P>.pack
std::string mark_key(const PackId& p);   // packs/<P>.dead: gc's mark (docs §8.3)
std::string manifest_key(const CheckpointId& c);

// The sealed packs (those with an index) and gc's marks.
struct BackendPacks {
  std::unordered_set<PackId, Id128Hash> indexed, marked;
};
Result<BackendPacks> list_packs(Backend& store);

// A chunk's place: its pack and its index entry.
struct Located {
  PackId pack;
  IndexEntry entry;
};
using ChunkMap = std::unordered_map<ChunkId, Located, Id128Hash>;

// use: every sealed pack (reading a checkpoint: one it names may be marked, docs §8.3); skip:
// leave out marked packs (a writer's dedup: a marked pack may go before the writer commits).
enum class MarkedPacks { use, skip };

// What a detailed listing of packs/ holds for one pack id (pointers into the listing).
struct PackObjects {
  const ObjectInfo* pack = nullptr;
  const ObjectInfo* index = nullptr;
  const ObjectInfo* mark = nullptr;  // gc's
  std::int64_t last_written() const {
    return std::max(pack ? pack->modified_unix : 0, index ? index->modified_unix : 0);
  }
  std::uint64_t bytes() const { return (pack ? pack->bytes : 0) + (index ? index->bytes : 0); }
};
std::map<PackId, PackObjects> pack_objects(const DirListing& packs_dir);

// Orders packs as readers prefer their copies of a chunk: those without gc's mark first (they
// stay, docs §8.3), then by id (the same choice every time).
void order_for_reading(std::vector<PackId>& packs,
                       const std::unordered_set<PackId, Id128Hash>& marked);

enum class IndexCache { use, bypass };

// The indexes of these packs, read in parallel, each checked; a bucket's from its local cache
// unless bypassed (verify trusts nothing cached).
std::vector<Result<PackIndex>> load_indexes(Backend& store, const std::vector<PackId>& ids,
                                            IndexCache cache = IndexCache::use);

// The ids of the committed checkpoints (manifests/), sorted; and their manifests, read in
// parallel, each decoded and checked against its name.
Result<std::vector<CheckpointId>> list_manifest_ids(Backend& store);
std::vector<Result<Manifest>> read_manifests(Backend& store, const std::vector<CheckpointId>& ids);

// An error that says nothing of the store's contents (endpoint down, credentials, clock): a
// listing that met one is incomplete.
bool transport_failure(const Error& e);

// Every chunk the store's sealed packs hold. An index that cannot be read is left out: in a
// destination its chunks count as absent (copied again), in a source as missing (an error then
// names the chunk); transport failures (endpoint down, credentials) fail the whole listing.
Result<ChunkMap> load_chunk_map(Backend& store, MarkedPacks marked);

// Records of one pack read with one ranged read.
struct RecordRange {
  PackId pack;
  std::uint64_t offset = 0, bytes = 0;
  std::vector<Located> records;
};

// Sorts records by their place in the store (pack, then offset): the fewest, largest reads.
void sort_by_place(std::vector<Located>& records);

// Adds a record to the last range when it follows it in the same pack within max_gap and the
// range stays within max_bytes; else starts a new range with it.
void add_to_ranges(std::vector<RecordRange>& ranges, const Located& record, std::uint64_t max_bytes,
                   std::uint64_t max_gap);

// Checks one record as read back, against where the index says it is; `origin` names the pack.
Status check_record(std::span<const std::byte> record, const Located& at,
                    const std::string& origin);

}  // namespace gcr::store
