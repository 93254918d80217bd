// CheckpointWriter: see checkpoint_writer.h. Bytes become chunks in Ingest (ingest.h); this file
// keeps the objects, the meta and the lock, and runs the commit.
//
// A failed add leaves the writer broken: every later call, and commit, return that first error,
// so a checkpoint missing part of its data can never be committed. Destroying a writer without a
// successful commit removes its unsealed packs; sealed ones are left to gc (Note [Sealed packs are
// gc's], pack_writer.cpp).
#include "store/checkpoint_writer.h"
#include <algorithm>

#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <set>
#include <unordered_set>

#include "gcr/file.h"
#include "store/chunker.h"
#include "store/commit.h"
#include "store/file_chunks.h"
#include "store/gc_lock.h"
#include "store/ingest.h"
#include "store/manifests.h"
#include "store/names.h"

namespace gcr::store {
namespace {

// How far back the lineage reaches. Chunks only older ancestors share still dedup, as "other".
constexpr int kMaxLineageDepth = 256;

std::uint64_t now_unix_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

// Chunk ids of the parent and its ancestors (meta "parent"), as far as they can be read.
std::unordered_set<ChunkId, Id128Hash> lineage_of(const Layout& layout, const Manifest& parent) {
  std::unordered_set<ChunkId, Id128Hash> ids;
  std::set<CheckpointId> visited{parent.id};
  const Manifest* m = &parent;
  std::optional<Manifest> ancestor;
  for (int depth = 0; depth < kMaxLineageDepth; ++depth) {
    for (const ChunkRef& c : m->chunks) {
      if (!c.zero) ids.insert(c.id);
    }
    auto next = Id128::from_hex(m->meta_or("parent"));
    if (!next || !visited.insert(*next).second) break;
    auto loaded = load_manifest(layout, *next);
    if (!loaded) break;  // removed or unreadable: the lineage ends there
    ancestor = std::move(loaded).value();
    m = &*ancestor;
  }
  return ids;
}

class Writer final : public CheckpointWriter {
 public:
  Writer(std::shared_ptr<StoreState> state, GcLock lock, std::unique_ptr<io::IoQueue> io,
         std::map<std::string, std::string> meta, std::optional<Manifest> parent,
         std::unordered_set<ChunkId, Id128Hash> lineage)
      : state_(std::move(state)),
        lock_(std::move(lock)),
        io_(std::move(io)),
        ingest_(*state_, *io_, std::move(lineage)),
        parent_(std::move(parent)),
        started_(std::chrono::steady_clock::now()) {
    manifest_.meta = std::move(meta);
    manifest_.id = CheckpointId::random();
  }

  const CheckpointId& id() const override { return manifest_.id; }

  ~Writer() override {
    (void)io_->drain();  // before ingest_'s packs go: completions refer to them
    if (!committed_) {
      for (auto& p : ingest_.packs()) p->discard();
    }
  }

  static constexpr std::uint64_t kStreamPieceBytes = 64ull << 20;

  Status add_region(std::uint64_t address, std::span<const std::byte> data, std::uint32_t device,
                    bool dirty) override {
    GCR_TRY(usable());
    return add_object(region_entry(address, data.size(), device, dirty),
                      [&](std::vector<ChunkRef>& refs) { return ingest_fixed(data, refs); });
  }

  Status add_region_streamed(std::uint64_t address, std::uint64_t size, std::uint32_t device,
                             bool dirty, const RegionFill& fill) override {
    GCR_TRY(usable());
    const std::uint64_t chunk = state_->options.chunk_bytes;
    const std::uint64_t piece = std::max<std::uint64_t>(chunk, kStreamPieceBytes / chunk * chunk);
    std::vector<std::byte> buf(static_cast<std::size_t>(std::min(piece, size)));
    return add_object(region_entry(address, size, device, dirty),
                      [&](std::vector<ChunkRef>& refs) -> Status {
                        for (std::uint64_t off = 0; off < size; off += piece) {
                          std::span<std::byte> part(
                              buf.data(), static_cast<std::size_t>(std::min(piece, size - off)));
                          GCR_TRY(fill(off, part));
                          GCR_TRY(ingest_fixed(part, refs));  // buf is refilled next
                        }
                        return ok();
                      });
  }

  Status add_region_from_parent(std::uint64_t address, std::uint64_t size,
                                std::uint32_t device) override {
    GCR_TRY(usable());
    if (!parent_) {
      return make_error(Errc::invalid_argument,
                        "add_region_from_parent: this checkpoint was begun without a parent");
    }
    const ObjectEntry* from = nullptr;
    for (const ObjectEntry& o : parent_->objects) {
      if (o.kind == ObjectKind::device_region && o.address == address && o.device == device &&
          o.name == owner_) {
        from = &o;
        break;
      }
    }
    ObjectEntry wanted;
    wanted.kind = ObjectKind::device_region;
    wanted.address = address;
    wanted.device = device;
    wanted.name = owner_;
    std::string where = object_label(wanted);
    if (from == nullptr) {
      return make_error(Errc::not_found,
                        "parent checkpoint " + parent_->id.hex() + " has no " + where);
    }
    if (from->size != size) {
      return make_error(Errc::invalid_argument, where + " is " + std::to_string(size) +
                                                    " bytes, but " + std::to_string(from->size) +
                                                    " in parent checkpoint " + parent_->id.hex());
    }
    ObjectEntry o = *from;
    o.dirty = false;
    return add_object(std::move(o), [&](std::vector<ChunkRef>& refs) -> Status {
      for (std::uint64_t i = 0; i < from->chunk_count; ++i) {
        GCR_TRY_ASSIGN(ChunkRef r, ingest_.reuse(parent_->chunks[from->first_chunk + i]));
        refs.push_back(r);
      }
      return ok();
    });
  }

  Status add_file(const std::string& relative, std::uint32_t mode,
                  const std::filesystem::path& source) override {
    GCR_TRY(usable());
    GCR_TRY(check_name(relative, "file"));
    GCR_TRY_ASSIGN(UniqueFd fd, io::open_file(source, O_RDONLY));
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return io::file_error("cannot stat", source, errno);
    if (!S_ISREG(st.st_mode)) {
      return make_error(Errc::invalid_argument, "'" + source.string() + "' is not a regular file");
    }
    ObjectEntry o;
    o.kind = ObjectKind::file;
    o.name = relative;
    o.mode = mode & 07777;
    o.size = static_cast<std::uint64_t>(st.st_size);
    bool pages = is_page_image(relative);
    return add_object(std::move(o), [&](std::vector<ChunkRef>& refs) -> Status {
      GCR_TRY(chunk_file(
          *io_, fd.get(), source, static_cast<std::uint64_t>(st.st_size), pages,
          state_->options.chunk_bytes,
          [&](std::span<const std::byte> data, std::span<const std::uint32_t> sizes,
              std::size_t& in_flight) { return ingest_.add(data, sizes, refs, in_flight); }));
      return ingest_.status();
    });
  }

  Status add_blob(const std::string& name, std::span<const std::byte> data) override {
    GCR_TRY(usable());
    GCR_TRY(check_name(name, "blob"));
    ObjectEntry o;
    o.kind = ObjectKind::blob;
    o.name = name;
    o.size = data.size();
    auto sizes = cut_fixed(data.size(), state_->options.chunk_bytes);
    return add_object(std::move(o), [&](std::vector<ChunkRef>& refs) -> Status {
      std::size_t in_flight = 0;
      Status s = ingest_.add(data, sizes, refs, in_flight);
      Status w = io::wait_until_zero(*io_, in_flight);
      GCR_TRY(s);
      GCR_TRY(w);
      return ingest_.status();
    });
  }

  void set_region_owner(const std::string& owner) override { owner_ = owner; }

  void set_meta(const std::string& key, const std::string& value) override {
    manifest_.meta[key] = value;
  }

  Result<CommitInfo> commit(std::optional<std::string> tag) override {
    GCR_TRY(usable());
    for (const auto& [key, value] : manifest_.meta) {
      if (!valid_key(key) || value.size() > (1u << 20)) {
        return make_error(Errc::invalid_argument,
                          "meta key '" + key.substr(0, 64) +
                              "' is not [a-z0-9_.]+ of at most 255 bytes (or its value exceeds "
                              "1 MiB)");
      }
    }
    if (tag) GCR_TRY(state_->layout.tag(*tag));  // refuse a bad name before anything is written
    Status s = finish(tag);
    if (!s) {
      broken_ = s;
      return std::move(s).error();
    }
    CommitInfo info{manifest_.id, manifest_.stats};
    lock_.release();
    return info;
  }

 private:
  Status usable() const {
    if (committed_) return make_error(Errc::invalid_argument, "checkpoint already committed");
    return broken_;
  }

  Status check_name(const std::string& name, const char* what) {
    if (!valid_relative_name(name)) {
      return make_error(Errc::invalid_argument,
                        std::string(what) + " name '" + name.substr(0, 64) +
                            "' must be a relative path without '.' or '..' components");
    }
    if (!names_.insert(name).second) {
      return make_error(Errc::invalid_argument,
                        std::string(what) + " '" + name + "' was already added");
    }
    return ok();
  }

  ObjectEntry region_entry(std::uint64_t address, std::uint64_t size, std::uint32_t device,
                           bool dirty) const {
    ObjectEntry o;
    o.kind = ObjectKind::device_region;
    o.name = owner_;
    o.address = address;
    o.device = device;
    o.dirty = dirty;
    o.size = size;
    return o;
  }

  // Cuts data into fixed-size chunks and ingests them; returns once every write from data is done
  // (the caller may reuse it).
  Status ingest_fixed(std::span<const std::byte> data, std::vector<ChunkRef>& refs) {
    auto sizes = cut_fixed(data.size(), state_->options.chunk_bytes);
    std::size_t in_flight = 0;
    Status s = ingest_.add(data, sizes, refs, in_flight);
    Status w = io::wait_until_zero(*io_, in_flight);
    GCR_TRY(s);
    GCR_TRY(w);
    return ingest_.status();
  }

  // Appends an object whose chunks `fill` produces. A failure breaks the writer.
  template <typename Fill>
  Status add_object(ObjectEntry o, Fill&& fill) {
    o.first_chunk = manifest_.chunks.size();
    Status s = fill(manifest_.chunks);
    if (!s) {
      broken_ = s;
      return s;
    }
    o.chunk_count = manifest_.chunks.size() - o.first_chunk;
    manifest_.objects.push_back(std::move(o));
    return ok();
  }

  Status finish(const std::optional<std::string>& tag) {
    GCR_TRY(io_->drain());
    GCR_TRY(ingest_.status());
    GCR_TRY_ASSIGN(auto sealed, seal_packs(state_->layout, ingest_.packs()));
    for (auto& index : sealed) state_->catalog.add(index);

    auto& meta = manifest_.meta;
    meta["parent"] = parent_ ? parent_->id.hex() : "";
    if (!meta.contains("name")) meta["name"] = tag.value_or("");
    if (!meta.contains("kind")) meta["kind"] = "gcr";
    if (!meta.contains("created_unix_ns")) meta["created_unix_ns"] = std::to_string(now_unix_ns());

    const IngestCounters& c = ingest_.counters();
    std::uint64_t logical = 0;
    for (const auto& o : manifest_.objects) logical += o.size;
    auto write_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now() - started_)
                        .count();
    manifest_.stats = {
        {"logical_bytes", logical},
        {"stored_bytes", c.stored_bytes},
        {"pack_bytes", c.record_bytes},
        {"new_bytes", c.bytes[static_cast<int>(DedupClass::fresh)]},
        {"zero_bytes", c.bytes[static_cast<int>(DedupClass::zero)]},
        {"dup_self_bytes", c.bytes[static_cast<int>(DedupClass::self)]},
        {"dup_parent_bytes", c.bytes[static_cast<int>(DedupClass::lineage)]},
        {"dup_other_bytes", c.bytes[static_cast<int>(DedupClass::other)]},
        {"chunks", c.chunks},
        {"new_chunks", c.new_chunks},
        {"objects", manifest_.objects.size()},
        {"compress_probe_bytes", c.probe_bytes},
        {"compress_input_bytes", c.compress_bytes},
        {"write_ns", static_cast<std::uint64_t>(write_ns)},
    };
    GCR_TRY(commit_manifest(state_->layout, manifest_));
    committed_ = true;
    if (tag) {
      return write_tag(state_->layout, *tag, manifest_.id)
          .context("checkpoint " + manifest_.id.hex() + " is committed, but naming it failed");
    }
    return ok();
  }

  std::shared_ptr<StoreState> state_;
  GcLock lock_;
  std::unique_ptr<io::IoQueue> io_;
  Ingest ingest_;
  std::optional<Manifest> parent_;
  Manifest manifest_;
  std::set<std::string> names_;
  Status broken_;
  bool committed_ = false;
  std::string owner_;  // the name of the regions added now (set_region_owner)
  std::chrono::steady_clock::time_point started_;
};

}  // namespace

Result<std::unique_ptr<CheckpointWriter>> make_checkpoint_writer(
    std::shared_ptr<StoreState> state, std::map<std::string, std::string> meta,
    std::optional<CheckpointId> parent) {
  for (const auto& [key, value] : meta) {
    if (!valid_key(key)) {
      return make_error(Errc::invalid_argument,
                        "meta key '" + key.substr(0, 64) + "' is not [a-z0-9_.]+");
    }
  }
  const Layout& layout = state->layout;
  GCR_TRY_ASSIGN(GcLock lock, GcLock::shared(layout.gc_lock()));
  GCR_TRY(state->catalog.refresh());
  std::optional<Manifest> parent_manifest;
  std::unordered_set<ChunkId, Id128Hash> lineage;
  if (parent) {
    GCR_TRY_ASSIGN(Manifest m, load_manifest(layout, *parent).context("reading the parent"));
    lineage = lineage_of(layout, m);
    parent_manifest = std::move(m);
  }
  auto io = state->new_io();
  return std::unique_ptr<CheckpointWriter>(
      new Writer(std::move(state), std::move(lock), std::move(io), std::move(meta),
                 std::move(parent_manifest), std::move(lineage)));
}

}  // namespace gcr::store
