// Where things live in a store (docs/image-format.md §1): the directory tree, file names built
// from ids, tag paths (the only place user input becomes a path, and only through valid_tag), the
// STORE marker, and the default store location.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string_view>

#include "gcr/chunk_id.h"
#include "gcr/result.h"

namespace gcr::store {

inline constexpr int kStoreMajor = 1;
inline constexpr std::uint64_t kMaxManifestBytes = 1ull << 30;
inline constexpr std::uint64_t kMaxIndexBytes = 64 + 40ull * (1u << 24);

struct Layout {
  std::filesystem::path root;

  std::filesystem::path marker() const { return root / "STORE"; }
  std::filesystem::path gc_lock() const { return root / "gc.lock"; }
  std::filesystem::path packs() const { return root / "packs"; }
  std::filesystem::path manifests() const { return root / "manifests"; }
  std::filesystem::path tags() const { return root / "tags"; }
  std::filesystem::path tmp() const { return root / "tmp"; }

  std::filesystem::path pack(const PackId& id) const { return packs() / (id.hex() + ".pack"); }
  std::filesystem::path index(const PackId& id) const { return packs() / (id.hex() + ".idx"); }
  std::filesystem::path manifest(const CheckpointId& id) const {
    return manifests() / (id.hex() + ".manifest");
  }
  // A fresh name in tmp/: "<32 random hex>.<suffix>".
  std::filesystem::path tmp_file(std::string_view suffix) const;
  // tags/<name>, or invalid_argument unless valid_tag(name).
  Result<std::filesystem::path> tag(std::string_view name) const;
};

// Makes the store's directories (0700) and STORE marker when create and missing; checks the
// marker otherwise. Refuses a non-empty directory that is not a store, and a newer major format.
Status prepare_store(const Layout& layout, bool create);

// GCR_STORE, else for euid 0 /var/lib/gcr/store, else $XDG_DATA_HOME/gcr/store (when absolute),
// else $HOME/.local/share/gcr/store. Arguments may be null (unset).
std::filesystem::path default_root_from(const char* gcr_store, const char* xdg_data_home,
                                        const char* home, uid_t euid);

// The id in a file name "<32 hex>.<ext>", when the name is exactly that.
std::optional<Id128> id_from_file_name(const std::string& name, std::string_view ext);

}  // namespace gcr::store
