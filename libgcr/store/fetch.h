// fetch_chunks: the read path every reader shares (checkpoint reads, materialize, verify, gc's
// rewrite). Reads records through an IoQueue with many in flight, then decodes and checks them on
// the worker pool: the record header against the index, the payload's codec, and the XXH3-128 of
// the raw bytes against the chunk id. No byte reaches a caller unchecked.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "gcr/manifest.h"
#include "gcr/result.h"
#include "io/io_queue.h"
#include "store/pack_format.h"
#include "store/pack_reader.h"
#include "gcr/store_workers.h"

namespace gcr::store {

struct FetchItem {
  ChunkId id;
  std::uint32_t raw_bytes = 0;
  bool zero = false;                 // all zeros, in no pack: out is cleared, the id checked
  const PackReader* pack = nullptr;  // where it is (not for zero chunks)
  IndexEntry entry;
  std::span<std::byte> out;  // exactly raw_bytes
  bool keep_stored = false;  // also hand back the stored payload (gc's rewrite)
  std::vector<std::byte> stored;
  Status result;  // this chunk's outcome
};

// Fetches every item into its out. Each item's own failure (I/O error, damage) lands in its
// result, naming the pack, the offset and what did not match; the call fails only when the
// IoQueue itself does.
Status fetch_chunks(io::IoQueue& io, WorkerPool& pool, std::span<FetchItem> items);

}  // namespace gcr::store
