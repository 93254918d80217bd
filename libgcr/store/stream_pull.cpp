// A restore streamed from a bucket: see gcr/stream_pull.h.
#include "gcr/stream_pull.h"

#include <unistd.h>

#include "gcr/manifest.h"
#include "gcr/remote_cache.h"
#include "store/backend_chunks.h"
#include "store/incoming.h"
#include "store/layout.h"

namespace gcr::store {
namespace {

// Stage 0: the chunks of the CRIU files and blobs (what the restore reads before anything runs);
// stage 1: the device regions' chunks, first-touched regions first, each region in order.
std::vector<std::vector<ChunkId>> stages_of(const Manifest& m) {
  std::vector<std::vector<ChunkId>> stages(2);
  auto chunks_of = [&](const ObjectEntry& o, std::vector<ChunkId>& into) {
    for (std::uint64_t k = 0; k < o.chunk_count && o.first_chunk + k < m.chunks.size(); ++k) {
      const ChunkRef& c = m.chunks[o.first_chunk + k];
      if (!c.zero) into.push_back(c.id);
    }
  };
  std::vector<const ObjectEntry*> regions;
  for (const ObjectEntry& o : m.objects) {
    if (o.kind == ObjectKind::device_region) {
      regions.push_back(&o);
    } else {
      chunks_of(o, stages[0]);
    }
  }
  for (std::size_t i : first_touch_order(m, regions)) chunks_of(*regions[i], stages[1]);
  return stages;
}

}  // namespace

Result<std::unique_ptr<StreamedPull>> StreamedPull::start(Backend& remote, const CheckpointId& id) {
  return start(remote, id, remote.local_cache() / "store");  // the bucket's cache (remote_cache.h)
}

Result<std::unique_ptr<StreamedPull>> StreamedPull::start(Backend& remote, const CheckpointId& id,
                                                          const std::filesystem::path& into) {
  std::unique_ptr<StreamedPull> pull(new StreamedPull());
  pull->id_ = id;
  pull->cache_store_ = into;
  BackendOptions options;
  options.create = true;
  // Held open (and with it gc.lock, shared) until the pull ends: the cache's gc, which would take
  // packs no committed manifest names, waits.
  GCR_TRY_ASSIGN(auto local, open_dir_backend(pull->cache_store_, options));
  Layout layout{pull->cache_store_};
  if (::access(layout.manifest(id).c_str(), F_OK) == 0) return pull;  // cached: restore as is

  GCR_TRY_ASSIGN(auto bytes, remote.get(manifest_key(id), kMaxManifestBytes));
  GCR_TRY_ASSIGN(Manifest m,
                 decode_manifest(bytes, "manifest " + id.hex() + " (" + remote.name() + ")"));
  if (m.id != id) {
    return make_error(Errc::corrupt_image, "manifest " + id.hex() + " (" + remote.name() +
                                               ") holds checkpoint " + m.id.hex());
  }
  GCR_TRY(announce_incoming(layout, id, bytes));
  pull->arriving_ = true;
  TransferOptions t;
  t.stages = stages_of(m);
  t.cancel = &pull->cancel_;
  StreamedPull* self = pull.get();
  t.stage_done = [self](std::size_t stage) {
    if (stage != 0) return;
    std::lock_guard lock(self->mu_);
    self->files_in_ = true;
    self->cv_.notify_all();
  };
  pull->thread_ =
      std::thread(&StreamedPull::run, self, std::ref(remote), std::move(local), std::move(t));
  return pull;
}

void StreamedPull::run(Backend& remote, std::unique_ptr<Backend> local, TransferOptions options) {
  auto r = copy_checkpoint(remote, *local, id_, options);
  Layout layout{cache_store_};
  if (r) {
    incoming_done(layout, id_);
    touch_cached_checkpoint(cache_store_, id_);
  } else {
    incoming_failed(layout, id_, r.error().message);
  }
  local.reset();  // gc.lock: the cache's gc may run again
  std::lock_guard lock(mu_);
  result_ = std::move(r);
  done_ = true;
  cv_.notify_all();
}

StreamedPull::~StreamedPull() {
  cancel();  // left without finish(): the restore did not happen
  if (thread_.joinable()) thread_.join();
}

Status StreamedPull::files_ready() {
  if (!arriving_) return ok();
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return files_in_ || done_; });
  if (done_ && !*result_) return result_->error();
  return ok();
}

Result<TransferReport> StreamedPull::finish() {
  if (!arriving_) {
    TransferReport r;
    r.id = id_;
    r.already_there = true;
    return r;
  }
  if (thread_.joinable()) thread_.join();
  return *result_;
}

}  // namespace gcr::store
