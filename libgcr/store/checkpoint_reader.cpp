// CheckpointReader: see checkpoint_reader.h. Reads go through fetch_chunks (fetch.h), so every
// byte handed out has been checked against its chunk id. A checkpoint whose chunks are not all in
// sealed packs fails to open, before anything is restored from it.
#include "store/checkpoint_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <unordered_map>

#include "gcr/file.h"
#include "store/fetch.h"
#include "store/gc_lock.h"
#include "store/incoming.h"
#include "store/manifests.h"

namespace gcr::store {
namespace {

// How many bytes of chunks materialize_files holds in memory per window (two windows at once).
constexpr std::uint64_t kMaterializeWindow = 64ull << 20;
// Files open at once while materializing.
constexpr std::size_t kFilesAtOnce = 128;
// prefetch: records of one pack at most this far apart are read ahead as one range.
constexpr std::uint64_t kPrefetchGap = 1ull << 20;

class Reader final : public CheckpointReader {
 public:
  Reader(std::shared_ptr<StoreState> state, Manifest m,
         std::map<PackId, std::shared_ptr<PackReader>> packs,
         std::unordered_map<ChunkId, ChunkLocation, Id128Hash> where, bool arriving)
      : state_(std::move(state)),
        manifest_(std::move(m)),
        packs_(std::move(packs)),
        where_(std::move(where)),
        arriving_(arriving),
        io_(state_->new_io()) {
    prefix_.resize(manifest_.chunks.size() + 1, 0);
    for (std::size_t i = 0; i < manifest_.chunks.size(); ++i) {
      prefix_[i + 1] = prefix_[i] + manifest_.chunks[i].raw_bytes;
    }
  }

  const Manifest& manifest() const override { return manifest_; }

  Status read(const ObjectEntry& o, std::uint64_t offset, std::span<std::byte> out) override {
    return read_impl(o, offset, out)
        .context("checkpoint " + manifest_.id.hex() + ": " + object_label(o));
  }

  void prefetch(const ObjectEntry& o, std::uint64_t offset, std::uint64_t size) override {
    if (Status s = check_object(o); !s || offset >= o.size || size == 0) return;
    size = std::min(size, o.size - offset);
    const std::uint64_t base = prefix_[o.first_chunk];
    std::size_t i = chunk_at(o, offset);
    // Neighbouring records of one pack are asked for as one range.
    int fd = -1;
    std::uint64_t from = 0, to = 0;
    auto ask = [&] {
      if (fd >= 0 && to > from)
        (void)posix_fadvise(fd, static_cast<off_t>(from), static_cast<off_t>(to - from),
                            POSIX_FADV_WILLNEED);
    };
    for (; i < o.first_chunk + o.chunk_count && prefix_[i] - base < offset + size; ++i) {
      const ChunkRef& c = manifest_.chunks[i];
      if (c.zero) continue;
      auto at = where_.find(c.id);
      if (at == where_.end()) continue;
      auto pack = packs_.find(at->second.pack);
      if (pack == packs_.end()) continue;
      const IndexEntry& e = at->second.entry;
      std::uint64_t a = e.offset, b = e.offset + e.record_bytes();
      if (pack->second->fd() == fd && a >= from && a <= to + kPrefetchGap) {
        to = std::max(to, b);
        continue;
      }
      ask();
      fd = pack->second->fd();
      from = a;
      to = b;
    }
    ask();
  }

  Status materialize_files(const std::filesystem::path& dir, const LeftOut& left_out) override {
    return materialize(dir, left_out)
        .context("checkpoint " + manifest_.id.hex() + ": materializing into '" + dir.string() +
                 "'");
  }

 private:
  Status check_object(const ObjectEntry& o) const {
    if (o.first_chunk > manifest_.chunks.size() ||
        o.chunk_count > manifest_.chunks.size() - o.first_chunk ||
        prefix_[o.first_chunk + o.chunk_count] - prefix_[o.first_chunk] != o.size) {
      return make_error(Errc::invalid_argument, "object is not one of this checkpoint's");
    }
    return ok();
  }

  // The chunk of a checked object holding `offset` (< its size): the last whose start is <= it.
  std::size_t chunk_at(const ObjectEntry& o, std::uint64_t offset) const {
    auto begin = prefix_.begin() + static_cast<std::ptrdiff_t>(o.first_chunk);
    auto end = begin + static_cast<std::ptrdiff_t>(o.chunk_count);
    return static_cast<std::size_t>(std::upper_bound(begin, end, prefix_[o.first_chunk] + offset) -
                                    prefix_.begin()) -
           1;
  }

  FetchItem item_for(const ChunkRef& c, std::span<std::byte> out) const {
    FetchItem item;
    item.id = c.id;
    item.raw_bytes = c.raw_bytes;
    item.zero = c.zero;
    item.out = out;
    if (!c.zero) {
      const ChunkLocation& loc = where_.at(c.id);
      item.pack = packs_.at(loc.pack).get();
      item.entry = loc.entry;
    }
    return item;
  }

  Status read_impl(const ObjectEntry& o, std::uint64_t offset, std::span<std::byte> out) {
    GCR_TRY(check_object(o));
    if (offset > o.size || out.size() > o.size - offset) {
      return make_error(Errc::invalid_argument, "read of [" + std::to_string(offset) + ", +" +
                                                    std::to_string(out.size()) + ") beyond its " +
                                                    std::to_string(o.size) + " bytes");
    }
    if (out.empty()) return ok();
    std::uint64_t base = prefix_[o.first_chunk];
    std::size_t i = chunk_at(o, offset);
    std::vector<FetchItem> items;
    std::deque<std::vector<std::byte>> partial;  // chunks read only in part
    struct Copy {
      std::size_t item;
      std::uint64_t from;  // offset in the chunk
      std::size_t to, n;   // into out
    };
    std::vector<Copy> copies;
    std::size_t done = 0;
    for (; done < out.size(); ++i) {
      const ChunkRef& c = manifest_.chunks[i];
      std::uint64_t chunk_start = prefix_[i] - base;
      std::uint64_t skip = offset + done - chunk_start;
      std::size_t n =
          static_cast<std::size_t>(std::min<std::uint64_t>(c.raw_bytes - skip, out.size() - done));
      if (skip == 0 && n == c.raw_bytes) {
        GCR_TRY(locate(c));
        items.push_back(item_for(c, out.subspan(done, n)));
      } else {
        GCR_TRY(locate(c));
        auto& buf = partial.emplace_back(c.raw_bytes);
        copies.push_back(Copy{items.size(), skip, done, n});
        items.push_back(item_for(c, buf));
      }
      done += n;
    }
    GCR_TRY(fetch_chunks(*io_, state_->pool, items));
    for (const FetchItem& item : items) GCR_TRY(item.result);
    for (const Copy& c : copies) {
      std::memcpy(out.data() + c.to, items[c.item].out.data() + c.from, c.n);
    }
    return ok();
  }

  Status materialize(const std::filesystem::path& dir, const LeftOut& left_out) {
    GCR_TRY(make_dirs_0700(dir));
    std::vector<const ObjectEntry*> files;
    for (const ObjectEntry& o : manifest_.objects) {
      if (o.kind == ObjectKind::file) files.push_back(&o);
    }
    // Two window buffers, used in turn for the whole call: one is written out while the next
    // window is fetched into the other. Left uninitialised and reused, so no byte is zeroed or
    // faulted in more than once (that was a third of materialize's time).
    std::uint64_t window = kMaterializeWindow;
    for (const ChunkRef& c : manifest_.chunks)
      window = std::max<std::uint64_t>(window, c.raw_bytes);
    std::array<std::unique_ptr<std::byte[]>, 2> buffers;
    for (auto& b : buffers) b.reset(new std::byte[window]);
    for (std::size_t at = 0; at < files.size(); at += kFilesAtOnce) {
      std::span<const ObjectEntry* const> group(files.data() + at,
                                                std::min(kFilesAtOnce, files.size() - at));
      GCR_TRY(materialize_group(dir, group, buffers, left_out));
    }
    return ok();
  }

  static Status make_dirs_0700(const std::filesystem::path& dir) {
    std::filesystem::path built;
    for (const auto& part : dir) {
      built /= part;
      if (part.empty() || part == "/") continue;
      GCR_TRY(io::make_dir(built));
    }
    return ok();
  }

  Status materialize_group(const std::filesystem::path& dir,
                           std::span<const ObjectEntry* const> group,
                           std::array<std::unique_ptr<std::byte[]>, 2>& buffers,
                           const LeftOut& left_out) {
    struct Out {
      const ObjectEntry* object;
      UniqueFd fd;
      std::filesystem::path path;
      int error = 0;
    };
    std::vector<Out> outs;
    for (const ObjectEntry* o : group) {
      GCR_TRY(check_object(*o));
      // Names were checked when the manifest was decoded (valid_relative_name): no "..", no
      // absolute path. Parents are made as needed; the file itself is never followed if a link.
      std::filesystem::path rel(o->name);
      std::filesystem::path parent = dir;
      for (auto it = rel.begin(); std::next(it) != rel.end(); ++it) {
        parent /= *it;
        GCR_TRY(io::make_dir(parent));
      }
      auto path = dir / rel;
      GCR_TRY_ASSIGN(UniqueFd fd,
                     io::open_file(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0600));
      outs.push_back(Out{o, std::move(fd), path});
    }

    // Every non-zero chunk of the group, in order: (file, offset in file, chunk).
    struct Piece {
      std::size_t out;
      std::uint64_t offset;
      const ChunkRef* chunk;
    };
    std::vector<Piece> pieces;
    for (std::size_t f = 0; f < outs.size(); ++f) {
      const ObjectEntry& o = *outs[f].object;
      auto skip = left_out.find(o.name);
      std::uint64_t offset = 0;
      for (std::uint64_t k = 0; k < o.chunk_count; ++k) {
        const ChunkRef& c = manifest_.chunks[o.first_chunk + k];
        if (!c.zero && !(skip != left_out.end() && within(skip->second, offset, c.raw_bytes)))
          pieces.push_back(Piece{f, offset, &c});
        offset += c.raw_bytes;
      }
    }

    // Windows of chunks: fetch (checked) into one of the two buffers, then write them out while
    // the next window is fetched into the other. A buffer is reused once its writes are done.
    struct Window {
      std::vector<std::span<std::byte>> buffers;
      std::size_t writes = 0;
    };
    std::deque<Window> windows;
    io::DrainGuard guard(*io_);  // after windows and outs
    for (std::size_t at = 0, turn = 0; at < pieces.size(); turn ^= 1) {
      Window& w = windows.emplace_back();
      std::vector<FetchItem> items;
      std::size_t first = at;
      std::uint64_t bytes = 0;
      while (at < pieces.size() &&
             (at == first || bytes + pieces[at].chunk->raw_bytes <= kMaterializeWindow)) {
        const ChunkRef& c = *pieces[at].chunk;
        GCR_TRY(locate(c));
        auto& buf = w.buffers.emplace_back(buffers[turn].get() + bytes, c.raw_bytes);
        items.push_back(item_for(c, buf));
        bytes += c.raw_bytes;
        ++at;
      }
      GCR_TRY(fetch_chunks(*io_, state_->pool, items));
      for (std::size_t k = 0; k < items.size(); ++k) {
        GCR_TRY(
            std::move(items[k].result).context(object_label(*outs[pieces[first + k].out].object)));
        Out& out = outs[pieces[first + k].out];
        ++w.writes;
        GCR_TRY(
            io_->write(out.fd.get(), pieces[first + k].offset, w.buffers[k], [&out, &w](int err) {
              --w.writes;
              if (err != 0 && out.error == 0) out.error = err;
            }));
      }
      while (windows.size() > 1) {
        GCR_TRY(io::wait_until_zero(*io_, windows.front().writes));
        windows.pop_front();
      }
    }
    GCR_TRY(io_->drain());
    for (Out& out : outs) {
      if (out.error != 0) return io::file_error("cannot write", out.path, out.error);
      // Trailing zero chunks were never written: the size makes them (as a hole).
      if (::ftruncate(out.fd.get(), static_cast<off_t>(out.object->size)) != 0) {
        return io::file_error("cannot set the size of", out.path, errno);
      }
      if (::fchmod(out.fd.get(), out.object->mode) != 0) {
        return io::file_error("cannot set the mode of", out.path, errno);
      }
    }
    return ok();
  }

  // Whether [offset, offset + size) lies within one of `ranges` (sorted by offset, not
  // overlapping).
  static bool within(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& ranges,
                     std::uint64_t offset, std::uint64_t size) {
    auto it = std::upper_bound(ranges.begin(), ranges.end(), offset,
                               [](std::uint64_t v, const auto& r) { return v < r.first; });
    if (it == ranges.begin()) return false;
    --it;
    return offset + size <= it->first + it->second;
  }

  // Where a chunk is: known since open, or (an arriving checkpoint) waited for.
  Status locate(const ChunkRef& c) {
    if (c.zero || where_.contains(c.id)) return ok();
    if (!arriving_) return make_error(Errc::internal, "chunk " + c.id.hex() + " was not located");
    return arrival_.await_chunk(*state_, manifest_.id, c.id, [&]() -> Result<bool> {
      auto loc = state_->catalog.find(c.id);
      if (!loc) return false;
      if (!packs_.contains(loc->pack)) {
        GCR_TRY_ASSIGN(auto pack, PackReader::open(state_->layout, loc->pack, loc->pack_bytes));
        packs_.emplace(loc->pack, std::move(pack));
      }
      where_.emplace(c.id, *loc);
      return true;
    });
  }

  std::shared_ptr<StoreState> state_;
  Manifest manifest_;
  std::map<PackId, std::shared_ptr<PackReader>> packs_;
  std::unordered_map<ChunkId, ChunkLocation, Id128Hash> where_;
  bool arriving_;
  ArrivalWatch arrival_;
  std::vector<std::uint64_t> prefix_;  // prefix_[i]: raw bytes of CHUNKS[0, i)
  std::unique_ptr<io::IoQueue> io_;
};

}  // namespace

Result<std::unique_ptr<CheckpointReader>> make_checkpoint_reader(std::shared_ptr<StoreState> state,
                                                                 const CheckpointId& id,
                                                                 bool arriving) {
  const Layout& layout = state->layout;
  // The lock keeps gc from deleting packs between looking them up and opening them.
  GCR_TRY_ASSIGN(GcLock lock, GcLock::shared(layout.gc_lock()));
  auto committed = load_manifest(layout, id);
  if (!committed && arriving && committed.error().code == Errc::not_found) {
    committed = load_incoming_manifest(layout, id);
  }
  GCR_TRY_ASSIGN(Manifest m, std::move(committed));
  GCR_TRY(state->catalog.refresh());
  std::map<PackId, std::shared_ptr<PackReader>> packs;
  std::unordered_map<ChunkId, ChunkLocation, Id128Hash> where;
  for (const ObjectEntry& o : m.objects) {
    for (std::uint64_t k = 0; k < o.chunk_count; ++k) {
      const ChunkRef& c = m.chunks[o.first_chunk + k];
      if (c.zero || where.contains(c.id)) continue;
      auto loc = state->catalog.find(c.id);
      if (!loc && arriving) continue;  // located when read (Reader::locate)
      if (!loc) {
        return make_error(Errc::corrupt_image,
                          "checkpoint " + id.hex() + ": " + object_label(o) + ": chunk " +
                              c.id.hex() +
                              " is in no sealed pack; the store is damaged, run "
                              "'gcr image verify " +
                              id.hex() + "'");
      }
      if (!packs.contains(loc->pack)) {
        GCR_TRY_ASSIGN(auto pack, PackReader::open(layout, loc->pack, loc->pack_bytes)
                                      .context("checkpoint " + id.hex() + ": " + object_label(o)));
        packs.emplace(loc->pack, std::move(pack));
      }
      where.emplace(c.id, *loc);
    }
  }
  // CHUNKS entries no object names (none in a manifest gcr wrote) are located too, so that every
  // range read() accepts can be served.
  for (std::size_t i = 0; i < m.chunks.size(); ++i) {
    const ChunkRef& c = m.chunks[i];
    if (c.zero || where.contains(c.id)) continue;
    auto loc = state->catalog.find(c.id);
    if (!loc && arriving) continue;
    if (!loc) {
      return make_error(Errc::corrupt_image, "checkpoint " + id.hex() + ": CHUNKS[" +
                                                 std::to_string(i) + "]: chunk " + c.id.hex() +
                                                 " is in no sealed pack");
    }
    if (!packs.contains(loc->pack)) {
      GCR_TRY_ASSIGN(auto pack, PackReader::open(layout, loc->pack, loc->pack_bytes));
      packs.emplace(loc->pack, std::move(pack));
    }
    where.emplace(c.id, *loc);
  }
  lock.release();
  return std::unique_ptr<CheckpointReader>(
      new Reader(std::move(state), std::move(m), std::move(packs), std::move(where), arriving));
}

}  // namespace gcr::store
