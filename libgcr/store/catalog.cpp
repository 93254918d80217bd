// PackCatalog: see catalog.h.
#include "store/catalog.h"

#include <dirent.h>

#include <cerrno>
#include <mutex>
#include <set>

#include "gcr/file.h"

namespace gcr::store {

Result<PackIndex> load_pack_index(const Layout& layout, const PackId& id) {
  auto path = layout.index(id);
  GCR_TRY_ASSIGN(auto bytes, io::read_file(path, kMaxIndexBytes));
  std::string origin = "pack index " + id.hex() + " (" + path.string() + ")";
  GCR_TRY_ASSIGN(PackIndex index, decode_pack_index(bytes, origin));
  if (index.pack != id) {
    return make_error(Errc::corrupt_image, origin + ": offset 24: pack id: " + index.pack.hex() +
                                               " does not match the file name");
  }
  return index;
}

Result<PackListing> list_packs(const Layout& layout) {
  DIR* dir = ::opendir(layout.packs().c_str());
  if (dir == nullptr) return io::file_error("cannot list", layout.packs(), errno);
  PackListing out;
  errno = 0;
  while (dirent* e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (auto id = id_from_file_name(name, "idx")) out.sealed.push_back(*id);
    if (auto id = id_from_file_name(name, "pack")) out.packs.push_back(*id);
  }
  int err = errno;
  ::closedir(dir);
  if (err != 0) return io::file_error("cannot list", layout.packs(), err);
  return out;
}

Status PackCatalog::refresh() {
  GCR_TRY_ASSIGN(PackListing listing, list_packs(layout_));
  std::set<PackId> present(listing.sealed.begin(), listing.sealed.end());
  std::vector<PackId> fresh;
  {
    std::shared_lock lock(mu_);
    for (const PackId& id : present) {
      if (!packs_.contains(id)) fresh.push_back(id);
    }
  }
  std::vector<std::shared_ptr<const PackIndex>> loaded;
  std::map<PackId, std::string> failed;
  for (const PackId& id : fresh) {
    auto index = load_pack_index(layout_, id);
    if (index) {
      loaded.push_back(std::make_shared<const PackIndex>(std::move(index).value()));
    } else if (index.error().code != Errc::not_found) {  // gone since the listing: gc's, fine
      failed.emplace(id, index.error().message);
    }
  }
  std::unique_lock lock(mu_);
  bool removed = false;
  for (auto it = packs_.begin(); it != packs_.end();) {
    if (!present.contains(it->first)) {
      it = packs_.erase(it);
      removed = true;
    } else {
      ++it;
    }
  }
  if (removed) {
    chunks_.clear();
    for (const auto& [id, index] : packs_) insert_locked(index);
  }
  for (const auto& index : loaded) {
    if (packs_.emplace(index->pack, index).second) insert_locked(index);
  }
  problems_ = std::move(failed);
  return ok();
}

void PackCatalog::insert_locked(const std::shared_ptr<const PackIndex>& index) {
  for (std::size_t i = 0; i < index->entries.size(); ++i) {
    chunks_.emplace(index->entries[i].id, Where{index.get(), i});
  }
}

void PackCatalog::add(std::shared_ptr<const PackIndex> index) {
  std::unique_lock lock(mu_);
  if (packs_.emplace(index->pack, index).second) insert_locked(index);
}

std::optional<ChunkLocation> PackCatalog::find(const ChunkId& id) const {
  std::shared_lock lock(mu_);
  auto it = chunks_.find(id);
  if (it == chunks_.end()) return std::nullopt;
  const PackIndex& index = *it->second.index;
  return ChunkLocation{index.pack, index.pack_bytes, index.entries[it->second.entry]};
}

bool PackCatalog::contains(const ChunkId& id) const {
  std::shared_lock lock(mu_);
  return chunks_.contains(id);
}

std::size_t PackCatalog::pack_count() const {
  std::shared_lock lock(mu_);
  return packs_.size();
}

std::map<PackId, std::shared_ptr<const PackIndex>> PackCatalog::packs() const {
  std::shared_lock lock(mu_);
  return packs_;
}

std::map<PackId, std::string> PackCatalog::problems() const {
  std::shared_lock lock(mu_);
  return problems_;
}

}  // namespace gcr::store
