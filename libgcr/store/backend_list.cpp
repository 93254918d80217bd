// Listing a Backend's checkpoints: see gcr/store_backend_list.h.
#include "gcr/store_backend_list.h"

#include <algorithm>
#include <map>

#include "store/backend_chunks.h"
#include "store/layout.h"

namespace gcr::store {

Result<std::map<CheckpointId, std::vector<std::string>>> read_backend_tags(Backend& store) {
  std::map<CheckpointId, std::vector<std::string>> tags_of;
  GCR_TRY_ASSIGN(auto tag_names, store.list("tags"));
  for (const auto& t : tag_names) {
    if (!valid_tag(t)) continue;
    auto bytes = store.get("tags/" + t, 64);
    if (!bytes) continue;  // removed meanwhile
    if (auto id = tag_target(*bytes)) tags_of[*id].push_back(t);
  }
  for (auto& [id, names] : tags_of) std::sort(names.begin(), names.end());
  return tags_of;
}

std::optional<CheckpointId> tag_target(std::span<const std::byte> bytes) {
  std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (text.size() != 33 || text[32] != '\n') return std::nullopt;
  return Id128::from_hex(text.substr(0, 32));
}

Result<std::vector<CheckpointInfo>> list_backend_checkpoints(Backend& store) {
  GCR_TRY_ASSIGN(auto ids, list_manifest_ids(store));
  GCR_TRY_ASSIGN(auto tags_of, read_backend_tags(store));
  auto manifests = read_manifests(store, ids);
  std::vector<CheckpointInfo> listed;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    Result<Manifest>& m = manifests[i];
    if (!m && m.error().code == Errc::not_found) continue;  // removed meanwhile
    CheckpointInfo& info = listed.emplace_back();
    info.id = ids[i];
    info.tags = tags_of[ids[i]];
    if (!m) {
      info.meta["error"] = m.error().message;
    } else {
      info.meta = std::move(m->meta);
      info.stats = std::move(m->stats);
    }
  }
  return listed;
}

Result<std::vector<std::string>> remove_backend_checkpoint(Backend& store, const CheckpointId& id) {
  GCR_TRY_ASSIGN(auto tags_of, read_backend_tags(store));
  GCR_TRY(store.get(manifest_key(id), kMaxManifestBytes));  // not_found: no such checkpoint
  GCR_TRY(store.remove(manifest_key(id)));
  std::vector<std::string> removed;
  for (const std::string& tag : tags_of[id]) {
    auto now = store.get("tags/" + tag, 64);
    if (!now || tag_target(*now) != id) continue;  // moved or removed meanwhile
    GCR_TRY(store.remove("tags/" + tag));
    removed.push_back(tag);
  }
  return removed;
}

}  // namespace gcr::store
