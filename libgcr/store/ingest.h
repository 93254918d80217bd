// Ingest: the write path of one checkpoint, from bytes to chunk refs. For each batch of chunks it
// hashes and spots zero chunks on the worker pool, classifies every chunk by dedup level (zero,
// seen earlier in this checkpoint, in the process's lineage, elsewhere in the store, or fresh),
// compresses only fresh chunks (probe first, compress.h) on the pool, and queues their records on
// this writer's packs through the IoQueue. A chunk already in the store, or already written by
// this checkpoint, is never written again.
#pragma once

#include <memory>
#include <span>
#include <unordered_set>
#include <vector>

#include "gcr/manifest.h"
#include "gcr/result.h"
#include "io/io_queue.h"
#include "store/pack_writer.h"
#include "store/store_state.h"

namespace gcr::store {

struct IngestCounters {
  std::uint64_t bytes[5] = {};  // raw bytes by DedupClass
  std::uint64_t chunks = 0, new_chunks = 0;
  std::uint64_t stored_bytes = 0;  // payload bytes written (after compression)
  std::uint64_t record_bytes = 0;  // pack bytes written, headers and padding included
  std::uint64_t probe_bytes = 0, compress_bytes = 0;
};

class Ingest {
 public:
  Ingest(StoreState& state, io::IoQueue& io, std::unordered_set<ChunkId, Id128Hash> lineage);

  // Takes in the chunks `sizes` cuts data into (sum(sizes) == data.size()), appending their refs
  // to `refs`. Writes of fresh chunks may still be in flight on return: they read from data, and
  // each decrements `in_flight` when it completes, so data must stay valid until it is zero.
  Status add(std::span<const std::byte> data, std::span<const std::uint32_t> sizes,
             std::vector<ChunkRef>& refs, std::size_t& in_flight);

  // Takes a ref from the parent checkpoint, unchanged: classifies it (self or lineage, or zero)
  // and checks that a sealed pack holds it.
  Result<ChunkRef> reuse(const ChunkRef& parent_ref);

  const IngestCounters& counters() const { return counters_; }
  std::vector<std::unique_ptr<PackWriter>>& packs() { return packs_; }
  // The first failed write, once the IoQueue has been drained.
  Status status() const;

 private:
  Result<PackWriter*> pack_for_next_record();

  StoreState& state_;
  io::IoQueue& io_;
  std::unordered_set<ChunkId, Id128Hash> lineage_;
  std::unordered_set<ChunkId, Id128Hash> seen_;  // every non-zero chunk this checkpoint names
  std::vector<std::unique_ptr<PackWriter>> packs_;
  IngestCounters counters_;
};

}  // namespace gcr::store
