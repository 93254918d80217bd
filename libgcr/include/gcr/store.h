// The image store (docs/image-format.md): content-addressed, deduplicated, compressed, crash-safe
// storage for checkpoints. Every checkpoint gcr takes lands here.
//
//   auto store = GCR_TRY(Store::open({.root = Store::default_root()}, /*create=*/true));
//   auto w = store.begin_checkpoint({{"name", "job-7"}, {"pid", "1234"}}, parent_id);
//   w->add_region(0x7f0000000000, bytes, /*device=*/0, /*dirty=*/true);
//   w->add_file("pages-1.img", 0600, "/tmp/criu-images/pages-1.img");
//   CommitInfo c = GCR_TRY(w->commit("job-7"));
//
// Thread-safety: a Store may be used from several threads; one CheckpointWriter or
// CheckpointReader by one thread at a time. Several processes may use one store at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gcr/chunk_id.h"
#include "gcr/manifest.h"
#include "gcr/result.h"

namespace gcr {
struct Settings;  // gcr/settings.h
}

namespace gcr::store {

struct StoreOptions {
  std::filesystem::path root;
  std::uint32_t chunk_bytes = 1u << 20;  // device-region chunk size
  int zstd_level = 1;
  bool use_io_uring = true;                      // falls back to blocking I/O when unavailable
  unsigned queue_depth = 32;                     // I/O requests in flight
  unsigned worker_threads = 0;                   // hashing/compression; 0 = number of CPUs
  std::uint64_t pack_target_bytes = 1ull << 30;  // a writer starts a new pack past this size
  // A reader of a checkpoint still arriving (store/incoming.h) gives up after this long without a
  // new pack; 0: Settings::arrival_idle (GCR_ARRIVAL_IDLE_S, gcr/settings.h).
  std::chrono::seconds arrival_idle{0};
};

// One entry of `gcr image ls`.
struct CheckpointInfo {
  CheckpointId id;
  std::vector<std::string> tags;
  std::map<std::string, std::string> meta;
  std::map<std::string, std::uint64_t> stats;
};

struct CommitInfo {
  CheckpointId id;
  std::map<std::string, std::uint64_t> stats;  // as stored in the manifest's STATS
};

// Bytes by dedup level, for a checkpoint or the whole store (`gcr image du`).
struct Usage {
  std::uint64_t logical_bytes = 0;  // what the checkpoints name, counted per checkpoint
  std::uint64_t stored_bytes = 0;   // what the packs hold for them, after compression and dedup
  std::uint64_t zero_bytes = 0, self_bytes = 0, lineage_bytes = 0, other_bytes = 0, fresh_bytes = 0;
  std::uint64_t pack_file_bytes = 0, garbage_bytes = 0;  // whole store only
  std::uint64_t checkpoints = 0, chunks = 0;
};

struct VerifyProblem {
  std::string checkpoint;  // id (and tag)
  std::string object;      // region address / file name
  std::string chunk;       // chunk id
  std::string what;        // "checksum mismatch in pack 0a1b… offset 1048576", ...
};
struct VerifyReport {
  std::uint64_t checkpoints = 0, chunks = 0, bytes = 0;
  std::vector<VerifyProblem> problems;
};

struct GcReport {
  std::uint64_t packs_deleted = 0, packs_rewritten = 0, tmp_files_deleted = 0;
  std::uint64_t bytes_freed = 0;
};

class CheckpointWriter;
class CheckpointReader;

class Store {
 public:
  // GCR_STORE (Settings::store, of settings() or of `settings`; gcr/settings.h), else
  // $XDG_DATA_HOME/gcr/store (~/.local/share/gcr/store); root: /var/lib/gcr/store.
  static std::filesystem::path default_root();
  static std::filesystem::path default_root(const Settings& settings);
  // Opens a store; with create, makes it (0700) when missing. Fails on a directory that is not a
  // store, or a store of a newer major format.
  static Result<std::shared_ptr<Store>> open(StoreOptions options, bool create);

  const StoreOptions& options() const;

  // A tag or an id (full, or a unique prefix of >= 8 hex digits) -> checkpoint id.
  Result<CheckpointId> resolve(std::string_view name) const;
  Result<std::vector<CheckpointInfo>> list() const;
  Result<Manifest> read_manifest(const CheckpointId& id) const;

  // Starts a checkpoint. `parent` (optional) is the process's previous checkpoint: chunks found
  // there count as lineage dedup, and regions not dirty may be taken from it unchanged.
  Result<std::unique_ptr<CheckpointWriter>> begin_checkpoint(
      std::map<std::string, std::string> meta, std::optional<CheckpointId> parent);
  // arriving: the checkpoint may still be arriving from a bucket (docs §8.4): chunks not yet
  // here are waited for when read.
  Result<std::unique_ptr<CheckpointReader>> open_checkpoint(const CheckpointId& id,
                                                            bool arriving = false);

  // Removes a checkpoint (its manifest and the tags naming it); its chunks go at the next gc.
  Status remove(const CheckpointId& id);
  Status tag(const CheckpointId& id, std::string_view name);
  Result<GcReport> gc();
  // Reads back and checks every byte of one checkpoint, or of all of them.
  Result<VerifyReport> verify(
      std::optional<CheckpointId> id,
      std::function<void(std::uint64_t done, std::uint64_t total)> progress = {});
  Result<Usage> usage(std::optional<CheckpointId> id) const;

  struct Impl;
  explicit Store(std::unique_ptr<Impl> impl);
  ~Store();
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// True if `name` may be a tag (docs/image-format.md §1).
bool valid_tag(std::string_view name);

class CheckpointWriter {
 public:
  virtual ~CheckpointWriter() = default;  // without commit(): aborts, nothing becomes visible

  // The id the checkpoint will have once committed (chosen when it begins, so that a process can
  // be told at its cut which checkpoint its next one descends from).
  virtual const CheckpointId& id() const = 0;

  // A device region's bytes. The data is read during the call (hashing, compression and I/O may
  // run in parallel inside it); the caller may reuse the buffer when it returns.
  virtual Status add_region(std::uint64_t address, std::span<const std::byte> data,
                            std::uint32_t device, bool dirty) = 0;
  // The same, for a region too large to hold in memory at once: `fill(offset, out)` provides
  // [offset, offset + out.size()) of it, piece by piece, in order; pieces are a multiple of the
  // chunk size (the last one excepted), so the chunks are those add_region would make.
  using RegionFill = std::function<Status(std::uint64_t offset, std::span<std::byte> out)>;
  virtual Status add_region_streamed(std::uint64_t address, std::uint64_t size,
                                     std::uint32_t device, bool dirty, const RegionFill& fill) = 0;
  // A device region unchanged since the parent checkpoint: its chunks are taken from there (the
  // parent's region of the same owner, address and device).
  virtual Status add_region_from_parent(std::uint64_t address, std::uint64_t size,
                                        std::uint32_t device) = 0;
  // The process the regions added from now on belong to: their object name (docs/image-format.md
  // §4: empty for the checkpoint's root process, "pid:N" for another process of a job).
  virtual void set_region_owner(const std::string& owner) = 0;
  // A file of a CRIU image directory (`relative` as it must be restored), read from `source`.
  virtual Status add_file(const std::string& relative, std::uint32_t mode,
                          const std::filesystem::path& source) = 0;
  virtual Status add_blob(const std::string& name, std::span<const std::byte> data) = 0;
  virtual void set_meta(const std::string& key, const std::string& value) = 0;

  // Makes every chunk durable, then commits the manifest atomically (docs §5), then tags it.
  virtual Result<CommitInfo> commit(std::optional<std::string> tag) = 0;
};

class CheckpointReader {
 public:
  virtual ~CheckpointReader() = default;
  virtual const Manifest& manifest() const = 0;
  // Reads [offset, offset + out.size()) of an object, verifying every chunk it touches.
  virtual Status read(const ObjectEntry& object, std::uint64_t offset,
                      std::span<std::byte> out) = 0;
  // A hint that [offset, offset + size) of an object is read next: a local store asks the kernel
  // to start reading those bytes of its packs into the page cache, and returns without waiting
  // (posix_fadvise WILLNEED). Out-of-range parts, and chunks not yet arrived, are left alone.
  virtual void prefetch(const ObjectEntry& object, std::uint64_t offset, std::uint64_t size) {
    (void)object, (void)offset, (void)size;
  }
  // Writes the checkpoint's CRIU image files into dir (created 0700), with their modes.
  Status materialize_files(const std::filesystem::path& dir) { return materialize_files(dir, {}); }
  // The same, leaving out byte ranges (offset, size) of some files (by name): a chunk that lies
  // wholly within them is not read or written, so the file has a hole there (zeros when read).
  // For what is served another way (Note [Host memory from the store] in
  // daemon/host_pages.h).
  using LeftOut = std::map<std::string, std::vector<std::pair<std::uint64_t, std::uint64_t>>>;
  virtual Status materialize_files(const std::filesystem::path& dir, const LeftOut& left_out) = 0;
};

}  // namespace gcr::store
