// A restore straight from a bucket (docs/image-format.md §8.4): the checkpoint is announced in the
// bucket's local cache store (incoming/), then pulled there on a thread of its own, its CRIU files
// and blobs first, then its device regions in first-touch order, then the rest. gcrd starts the
// restore once the files are in (files_ready) and, loading the regions on demand, waits for
// each chunk that has not arrived yet. The process runs long before the whole checkpoint is here.
// In gcr_remote, with the other transfers (gcr/store_transfer.h); `gcr restore` of an s3:// name.
#pragma once

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "gcr/result.h"
#include "gcr/store_backend.h"
#include "gcr/store_transfer.h"

namespace gcr::store {

class StreamedPull {
 public:
  // Starts bringing checkpoint `id` of `remote` into its cache store. When the cache holds it
  // committed already there is nothing to stream (arriving() is false).
  static Result<std::unique_ptr<StreamedPull>> start(Backend& remote, const CheckpointId& id);
  // The same into the local store `into` (a part of a job placed on this host, pulled from a
  // peer's memory: Note [Checkpoints in peers' memory] in daemon/memory_tier.h).
  static Result<std::unique_ptr<StreamedPull>> start(Backend& remote, const CheckpointId& id,
                                                     const std::filesystem::path& into);
  ~StreamedPull();  // cancels the pull unless finish() was called, and waits for it
  StreamedPull(const StreamedPull&) = delete;
  StreamedPull& operator=(const StreamedPull&) = delete;

  bool arriving() const { return arriving_; }
  // Blocks until the CRIU files and blobs are in the cache, or the pull failed (its error).
  Status files_ready();
  // Blocks until the pull is done (committed in the cache); what it moved.
  Result<TransferReport> finish();
  // Stops the pull before its next pack (the restore failed: no one waits for the rest).
  void cancel() { cancel_.store(true); }

 private:
  StreamedPull() = default;
  void run(Backend& remote, std::unique_ptr<Backend> local, TransferOptions options);

  CheckpointId id_;
  std::filesystem::path cache_store_;
  bool arriving_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  bool files_in_ = false, done_ = false;
  std::optional<Result<TransferReport>> result_;
  std::atomic<bool> cancel_{false};
  std::thread thread_;
};

}  // namespace gcr::store
