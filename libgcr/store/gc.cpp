// gc: see gc.h.
//
// Safety rests on the lock: with gc.lock exclusive no writer is open, so every chunk any manifest
// will ever name from the packs present is named by a manifest already committed (Note [Sealed
// packs are gc's], pack_writer.cpp). If any manifest cannot be read, gc deletes nothing: it cannot
// know what that checkpoint needs. Deletion order keeps every crash safe: a rewritten pack is
// sealed and packs/ fsynced before the old one goes; an old pack loses its .idx before its data,
// so a crash in between leaves an unsealed pack, which the next gc removes.
#include "store/gc.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "gcr/file.h"
#include "gcr/unique_fd.h"
#include "store/commit.h"
#include "store/fault.h"
#include "store/fetch.h"
#include "store/gc_lock.h"
#include "store/manifests.h"
#include "store/pack_writer.h"

namespace gcr::store {
namespace {

constexpr std::uint64_t kRewriteWindow = 64ull << 20;

std::uint64_t size_on_disk(const std::filesystem::path& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
}

// Copies the live entries of `old` into a new sealed pack. Checked on the way: a chunk that does
// not read back intact stops the rewrite and the old pack stays.
Status rewrite_pack(StoreState& state, const PackIndex& old, const std::vector<IndexEntry>& live) {
  const Layout& layout = state.layout;
  GCR_TRY_ASSIGN(auto reader, PackReader::open(layout, old.pack, old.pack_bytes));
  GCR_TRY_ASSIGN(auto writer, PackWriter::create(layout));
  bool sealed = false;
  auto give_up = [&] {
    if (!sealed) writer->discard();
  };
  auto io = state.new_io();
  for (std::size_t at = 0; at < live.size();) {
    std::vector<std::vector<std::byte>> buffers;
    std::vector<FetchItem> items;
    std::uint64_t bytes = 0;
    std::size_t first = at;
    while (at < live.size() && (at == first || bytes + live[at].raw_bytes <= kRewriteWindow)) {
      const IndexEntry& e = live[at++];
      bytes += e.raw_bytes;
      FetchItem item;
      item.id = e.id;
      item.raw_bytes = e.raw_bytes;
      item.pack = reader.get();
      item.entry = e;
      item.keep_stored = true;
      item.out = buffers.emplace_back(e.raw_bytes);
      items.push_back(std::move(item));
    }
    Status s = fetch_chunks(*io, state.pool, items);
    for (FetchItem& item : items) {
      if (!s) break;
      if (!item.result) {
        s = std::move(item.result);
        break;
      }
      auto payload = std::make_shared<std::vector<std::byte>>(std::move(item.stored));
      auto r = writer->append(*io, item.id, item.entry.codec, item.raw_bytes, *payload,
                              [payload](int) {});
      if (!r) s = std::move(r).error();
    }
    if (Status d = io->drain(); s && !d) s = std::move(d);
    if (!s) {
      give_up();
      return s;
    }
  }
  std::vector<std::unique_ptr<PackWriter>> packs;
  packs.push_back(std::move(writer));
  auto sealed_indexes = seal_packs(layout, packs);
  if (!sealed_indexes) {
    if (!packs.back()->sealed()) packs.back()->discard();
    return std::move(sealed_indexes).error();
  }
  return ok();
}

Status delete_pack(const Layout& layout, const PackId& id) {
  GCR_TRY(io::remove_file(layout.index(id)));
  fault_point(Fault::gc_after_index_delete);
  return io::remove_file(layout.pack(id));
}

// One of the store's directories, opened without following a link; an empty fd when it does not
// exist. A link there is refused: someone who can write the store put it there.
Result<UniqueFd> open_store_dir(const std::filesystem::path& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd || errno == ENOENT) return fd;
  if (errno == ELOOP || errno == ENOTDIR)
    return Error{Errc::permission_denied,
                 dir.string() + " is not a directory of the store but a link or a file; gc " +
                     "deleted nothing there (someone who can write the store replaced it)"};
  return io::file_error("cannot open", dir, errno);
}

// The names in an open directory (without "." and "..").
std::vector<std::string> entries_of(int dirfd) {
  std::vector<std::string> names;
  int dup = ::fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
  DIR* dir = dup >= 0 ? ::fdopendir(dup) : nullptr;
  if (!dir) {
    if (dup >= 0) ::close(dup);
    return names;
  }
  while (dirent* e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(dir);
  return names;
}

}  // namespace

Result<GcReport> collect_garbage(StoreState& state) {
  const Layout& layout = state.layout;
  GCR_TRY_ASSIGN(GcLock lock, GcLock::exclusive(layout.gc_lock()));
  GCR_TRY(state.catalog.refresh());
  GcReport report;

  // 1. The live set: every chunk a committed manifest names.
  std::unordered_set<ChunkId, Id128Hash> live;
  GCR_TRY_ASSIGN(auto ids, list_checkpoint_ids(layout));
  for (const CheckpointId& id : ids) {
    auto m = load_manifest(layout, id);
    if (!m) {
      if (m.error().code == Errc::not_found) continue;  // removed meanwhile: its chunks are dead
      return make_error(m.error().code,
                        "gc: " + m.error().message +
                            "; gc deleted nothing, since it cannot tell which chunks this "
                            "checkpoint needs: remove the checkpoint or restore the file, then "
                            "run gc again");
    }
    for (const ChunkRef& c : m->chunks) {
      if (!c.zero) live.insert(c.id);
    }
  }

  // 2. Unsealed packs (a writer's that crashed or gave up) and orphaned indexes.
  GCR_TRY_ASSIGN(PackListing listing, list_packs(layout));
  std::set<PackId> sealed(listing.sealed.begin(), listing.sealed.end());
  std::set<PackId> with_data(listing.packs.begin(), listing.packs.end());
  for (const PackId& id : with_data) {
    if (sealed.contains(id)) continue;
    report.bytes_freed += size_on_disk(layout.pack(id));
    GCR_TRY(io::remove_file(layout.pack(id)));
    ++report.packs_deleted;
  }

  // 3. Sealed packs: one copy of each live chunk is kept (the first pack in id order holding
  // it); a pack keeping none is deleted, one keeping less than half its bytes is rewritten.
  // A pack whose index does not load is left alone: its contents are unknown.
  auto packs = state.catalog.packs();
  std::unordered_map<ChunkId, PackId, Id128Hash> owner;
  for (const auto& [pack_id, index] : packs) {
    if (!with_data.contains(pack_id)) continue;  // index without data: nothing to keep there
    for (const IndexEntry& e : index->entries) {
      if (live.contains(e.id)) owner.emplace(e.id, pack_id);
    }
  }
  for (const auto& [pack_id, index] : packs) {
    std::vector<IndexEntry> keep;
    std::uint64_t live_bytes = 0;
    for (const IndexEntry& e : index->entries) {
      auto it = owner.find(e.id);
      if (it != owner.end() && it->second == pack_id) {
        keep.push_back(e);
        live_bytes += e.record_bytes();
      }
    }
    std::uint64_t size = size_on_disk(layout.pack(pack_id));
    if (keep.empty()) {
      GCR_TRY(delete_pack(layout, pack_id));
      report.bytes_freed += size;
      ++report.packs_deleted;
    } else if (live_bytes * 2 < index->pack_bytes - kPackHeaderBytes) {
      std::sort(keep.begin(), keep.end(),
                [](const IndexEntry& a, const IndexEntry& b) { return a.offset < b.offset; });
      GCR_TRY(rewrite_pack(state, *index, keep).context("gc: rewriting pack " + pack_id.hex()));
      fault_point(Fault::gc_after_rewrite);
      GCR_TRY(delete_pack(layout, pack_id));
      report.bytes_freed += size;
      ++report.packs_rewritten;
    }
  }
  GCR_TRY(io::sync_dir(layout.packs()));

  // 4. tmp/: nothing there belongs to a live writer while gc holds the lock. Removed through the
  // directory opened without following a link, each entry unlinked as it is (a link there goes,
  // not what it names): a store another user can write is no way to make root delete elsewhere.
  GCR_TRY_ASSIGN(UniqueFd tmp, open_store_dir(layout.tmp()));
  if (tmp) {
    for (const auto& name : entries_of(tmp.get())) {
      struct stat st {};
      if (::fstatat(tmp.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
        report.bytes_freed += static_cast<std::uint64_t>(st.st_blocks) * 512;
      if (::unlinkat(tmp.get(), name.c_str(), 0) != 0 && errno != ENOENT)
        return io::file_error("cannot remove", layout.tmp() / name, errno);
      ++report.tmp_files_deleted;
    }
  }

  // 5. Tags naming a checkpoint that no longer exists (ibid.: through tags/ itself).
  std::set<CheckpointId> existing(ids.begin(), ids.end());
  GCR_TRY_ASSIGN(UniqueFd tags_dir, open_store_dir(layout.tags()));
  using Tags = std::map<std::string, CheckpointId>;
  if (auto tags = tags_dir ? read_tags(layout) : Result<Tags>(Tags{})) {
    for (const auto& [name, id] : *tags)
      if (!existing.contains(id) && ::unlinkat(tags_dir.get(), name.c_str(), 0) != 0 &&
          errno != ENOENT)
        return io::file_error("cannot remove", layout.tags() / name, errno);
  }
  GCR_TRY(state.catalog.refresh());
  return report;
}

}  // namespace gcr::store
