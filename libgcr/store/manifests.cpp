// Manifest files in a store: see manifests.h.
#include "store/manifests.h"

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "gcr/file.h"
#include "gcr/store.h"

namespace gcr::store {

Result<Manifest> load_manifest(const Layout& layout, const CheckpointId& id) {
  auto path = layout.manifest(id);
  auto bytes = io::read_file(path, kMaxManifestBytes);
  if (!bytes) {
    if (bytes.error().code == Errc::not_found) {
      return make_error(Errc::not_found,
                        "checkpoint " + id.hex() + " does not exist (no '" + path.string() + "')");
    }
    return std::move(bytes).error();
  }
  std::string origin = id.hex() + " (" + path.string() + ")";
  GCR_TRY_ASSIGN(Manifest m, decode_manifest(*bytes, origin));
  if (m.id != id) {
    return make_error(Errc::corrupt_image, "manifest " + origin + ": offset 24: checkpoint id: " +
                                               m.id.hex() + " does not match the file name");
  }
  return m;
}

Result<std::vector<CheckpointId>> list_checkpoint_ids(const Layout& layout) {
  DIR* dir = ::opendir(layout.manifests().c_str());
  if (dir == nullptr) return io::file_error("cannot list", layout.manifests(), errno);
  std::vector<CheckpointId> ids;
  errno = 0;
  while (dirent* e = ::readdir(dir)) {
    if (auto id = id_from_file_name(e->d_name, "manifest")) ids.push_back(*id);
  }
  int err = errno;
  ::closedir(dir);
  if (err != 0) return io::file_error("cannot list", layout.manifests(), err);
  std::sort(ids.begin(), ids.end());
  return ids;
}

Result<std::map<std::string, CheckpointId>> read_tags(const Layout& layout) {
  DIR* dir = ::opendir(layout.tags().c_str());
  if (dir == nullptr) return io::file_error("cannot list", layout.tags(), errno);
  std::vector<std::string> names;
  errno = 0;
  while (dirent* e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (valid_tag(name) && name != "." && name != "..") names.push_back(name);
  }
  int err = errno;
  ::closedir(dir);
  if (err != 0) return io::file_error("cannot list", layout.tags(), err);
  std::map<std::string, CheckpointId> tags;
  for (const auto& name : names) {
    auto bytes = io::read_file(layout.tags() / name, 64);
    if (!bytes || bytes->size() != 33 || (*bytes)[32] != std::byte{'\n'}) continue;
    auto id = Id128::from_hex(std::string_view(reinterpret_cast<const char*>(bytes->data()), 32));
    if (id) tags.emplace(name, *id);
  }
  return tags;
}

std::string object_label(const ObjectEntry& o) {
  switch (o.kind) {
    case ObjectKind::device_region: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "region 0x%llx (device %u)",
                    static_cast<unsigned long long>(o.address), o.device);
      return buf;
    }
    case ObjectKind::file:
      return "file " + o.name;
    case ObjectKind::blob:
      return "blob " + o.name;
  }
  return "object";
}

std::string checkpoint_label(const CheckpointId& id, const std::vector<std::string>& tags) {
  std::string s = id.hex();
  if (!tags.empty()) {
    s += " (";
    for (std::size_t i = 0; i < tags.size(); ++i) s += (i ? ", " : "") + tags[i];
    s += ")";
  }
  return s;
}

}  // namespace gcr::store
