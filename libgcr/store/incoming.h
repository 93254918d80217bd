// A checkpoint still arriving in a local store: a restore streamed from a bucket
// (docs/image-format.md §8.4). The transfer that brings it writes incoming/<C>.manifest first,
// then the chunks, in the order the restore reads them, in packs sealed one after another, then
// commits the manifest as every transfer does (manifests/<C>.manifest) and removes the incoming
// one. incoming/<C>.owner names the process doing the transfer (pid and start time); a transfer
// that fails leaves incoming/<C>.failed, holding its error, for the reader.
//
// The reader (make_checkpoint_reader with arriving) opens the checkpoint from the incoming
// manifest and, for a chunk not yet in a sealed pack, waits: it watches packs/ (inotify), brings
// the catalog up to date when a pack is sealed, and gives up when the transfer failed, when it
// stopped (nothing incoming and nothing committed, or its process gone), or when no pack arrived
// for a while.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <span>
#include <string>

#include "gcr/manifest.h"
#include "gcr/result.h"
#include "gcr/unique_fd.h"
#include "store/layout.h"

namespace gcr::store {

struct StoreState;

std::filesystem::path incoming_manifest_path(const Layout& layout, const CheckpointId& id);
std::filesystem::path incoming_failed_path(const Layout& layout, const CheckpointId& id);

// The writer's side.
Status announce_incoming(const Layout& layout, const CheckpointId& id,
                         std::span<const std::byte> manifest_bytes);
void incoming_failed(const Layout& layout, const CheckpointId& id, const std::string& message);
void incoming_done(const Layout& layout, const CheckpointId& id);  // removes what is left

// The reader's side.
Result<Manifest> load_incoming_manifest(const Layout& layout, const CheckpointId& id);

// One reader's waits for the chunks of an arriving checkpoint.
class ArrivalWatch {
 public:
  // Calls found() after each catalog refresh until it returns true (or an error). Gives up after
  // 60 s without a new pack (StoreOptions::arrival_idle, else GCR_ARRIVAL_IDLE_S, overrides).
  Status await_chunk(StoreState& state, const CheckpointId& checkpoint, const ChunkId& chunk,
                     const std::function<Result<bool>()>& found);

 private:
  // inotify on packs/, made at the first real wait and kept: closing an inotify instance waits
  // for an RCU grace period (10-20 ms measured), too long to pay per chunk.
  UniqueFd watch_;
};

}  // namespace gcr::store
