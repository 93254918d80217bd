// The commit sequence: see commit.h.
#include "store/commit.h"

#include <fcntl.h>

#include "gcr/file.h"
#include "store/fault.h"

namespace gcr::store {

Result<std::vector<std::shared_ptr<const PackIndex>>> seal_packs(
    const Layout& layout, std::vector<std::unique_ptr<PackWriter>>& packs) {
  std::vector<std::shared_ptr<const PackIndex>> sealed;
  if (packs.empty()) return sealed;
  for (auto& p : packs) GCR_TRY(p->sync());
  fault_point(Fault::after_pack_sync);
  for (auto& p : packs) {
    GCR_TRY_ASSIGN(auto index, p->seal());
    sealed.push_back(std::move(index));
  }
  fault_point(Fault::after_index_rename);
  // One fsync covers the packs' own entries (renamed in when created) and their indexes.
  GCR_TRY(io::sync_dir(layout.packs()));
  return sealed;
}

Status commit_manifest(const Layout& layout, const Manifest& manifest) {
  auto bytes = encode_manifest(manifest);
  auto tmp = layout.tmp_file("manifest");
  {
    GCR_TRY_ASSIGN(UniqueFd fd, io::open_file(tmp, O_WRONLY | O_CREAT | O_EXCL, 0600));
    Status s = io::write_all(fd.get(), bytes, 0, tmp);
    if (s) s = io::sync_fd(fd.get(), tmp);
    if (!s) {
      (void)io::remove_file(tmp);
      return s;
    }
  }
  fault_point(Fault::before_manifest_rename);
  if (Status s = io::rename_file(tmp, layout.manifest(manifest.id)); !s) {
    (void)io::remove_file(tmp);
    return s;
  }
  fault_point(Fault::after_manifest_rename);
  return io::sync_dir(layout.manifests());
}

Status write_tag(const Layout& layout, std::string_view name, const CheckpointId& id) {
  GCR_TRY_ASSIGN(auto path, layout.tag(name));
  std::string text = id.hex() + "\n";
  GCR_TRY(io::write_file_durably(layout.tmp_file("tag"), path,
                                 std::as_bytes(std::span(text.data(), text.size()))));
  fault_point(Fault::after_tag_rename);
  return io::sync_dir(layout.tags());
}

}  // namespace gcr::store
