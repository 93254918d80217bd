// Store (gcr/store.h): opening a store, names and ids, listing, tags and removal. The write path is
// checkpoint_writer.cpp, the read path checkpoint_reader.cpp, and gc, verify and usage have files
// of their own.
#include "gcr/store.h"

#include <unistd.h>

#include <cctype>
#include <cstdlib>

#include "gcr/file.h"
#include "gcr/settings.h"
#include "store/checkpoint_reader.h"
#include "store/checkpoint_writer.h"
#include "store/commit.h"
#include "store/gc.h"
#include "store/layout.h"
#include "store/manifests.h"
#include "store/store_state.h"
#include "store/usage.h"
#include "store/verify.h"

namespace gcr::store {

std::filesystem::path Store::default_root() {
  return default_root(settings());
}

std::filesystem::path Store::default_root(const Settings& settings) {
  return default_root_from(settings.store ? settings.store->c_str() : nullptr,
                           std::getenv("XDG_DATA_HOME"), std::getenv("HOME"), ::geteuid());
}

Result<std::shared_ptr<Store>> Store::open(StoreOptions options, bool create) {
  if (options.root.empty()) {
    return make_error(Errc::invalid_argument, "no store directory given");
  }
  if (options.chunk_bytes < 4096 || options.chunk_bytes > (64u << 20)) {
    return make_error(Errc::invalid_argument, "chunk_bytes " + std::to_string(options.chunk_bytes) +
                                                  " outside 4 KiB..64 MiB");
  }
  if (options.queue_depth == 0) options.queue_depth = 1;
  if (options.queue_depth > 4096) options.queue_depth = 4096;
  GCR_TRY(prepare_store(Layout{options.root}, create));
  auto impl = std::make_unique<Impl>();
  impl->state = std::make_shared<StoreState>(std::move(options));
  return std::make_shared<Store>(std::move(impl));
}

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;

const StoreOptions& Store::options() const {
  return impl_->state->options;
}

Result<CheckpointId> Store::resolve(std::string_view name) const {
  const Layout& layout = impl_->state->layout;
  auto exists = [&](const CheckpointId& id) {
    return ::access(layout.manifest(id).c_str(), F_OK) == 0;
  };
  if (valid_tag(name)) {
    auto bytes = io::read_file(layout.tags() / std::string(name), 64);
    if (bytes) {
      auto text = std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size());
      auto id = text.size() == 33 && text[32] == '\n' ? Id128::from_hex(text.substr(0, 32))
                                                      : std::nullopt;
      if (!id) {
        return make_error(Errc::corrupt_image, "tag '" + std::string(name) + "' ('" +
                                                   (layout.tags() / std::string(name)).string() +
                                                   "') does not hold a checkpoint id");
      }
      if (!exists(*id)) {
        return make_error(Errc::not_found, "tag '" + std::string(name) + "' names checkpoint " +
                                               id->hex() + ", which no longer exists");
      }
      return *id;
    }
  }
  bool hex = name.size() >= 8 && name.size() <= 32 &&
             name.find_first_not_of("0123456789abcdefABCDEF") == std::string_view::npos;
  if (!hex) {
    if (!valid_tag(name)) GCR_TRY(layout.tag(name));  // the invalid_argument explaining names
    return make_error(Errc::not_found, "no checkpoint named '" + std::string(name) + "'");
  }
  std::string prefix(name);
  for (char& c : prefix) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (prefix.size() == 32) {
    auto id = Id128::from_hex(prefix);
    if (id && exists(*id)) return *id;
    return make_error(Errc::not_found, "no checkpoint " + prefix);
  }
  GCR_TRY_ASSIGN(auto ids, list_checkpoint_ids(layout));
  std::vector<CheckpointId> matches;
  for (const auto& id : ids) {
    if (id.hex().starts_with(prefix)) matches.push_back(id);
  }
  if (matches.size() == 1) return matches[0];
  if (matches.empty()) return make_error(Errc::not_found, "no checkpoint named '" + prefix + "'");
  return make_error(Errc::invalid_argument, "'" + prefix + "' is the start of " +
                                                std::to_string(matches.size()) +
                                                " checkpoint ids; give more digits");
}

Result<std::vector<CheckpointInfo>> Store::list() const {
  const Layout& layout = impl_->state->layout;
  GCR_TRY_ASSIGN(auto ids, list_checkpoint_ids(layout));
  std::map<CheckpointId, std::vector<std::string>> tags_of;
  GCR_TRY_ASSIGN(auto tags, read_tags(layout));
  for (const auto& [name, id] : tags) tags_of[id].push_back(name);
  std::vector<CheckpointInfo> out;
  for (const auto& id : ids) {
    auto m = load_manifest(layout, id);
    if (!m && m.error().code == Errc::not_found) continue;  // removed meanwhile
    CheckpointInfo info;
    info.id = id;
    info.tags = tags_of[id];
    if (m) {
      info.meta = std::move(m->meta);
      info.stats = std::move(m->stats);
    } else {
      info.meta["error"] = m.error().message;  // listed, so that it can be seen and removed
    }
    out.push_back(std::move(info));
  }
  return out;
}

Result<Manifest> Store::read_manifest(const CheckpointId& id) const {
  return load_manifest(impl_->state->layout, id);
}

Result<std::unique_ptr<CheckpointWriter>> Store::begin_checkpoint(
    std::map<std::string, std::string> meta, std::optional<CheckpointId> parent) {
  return make_checkpoint_writer(impl_->state, std::move(meta), parent);
}

Result<std::unique_ptr<CheckpointReader>> Store::open_checkpoint(const CheckpointId& id,
                                                                 bool arriving) {
  return make_checkpoint_reader(impl_->state, id, arriving);
}

Status Store::remove(const CheckpointId& id) {
  const Layout& layout = impl_->state->layout;
  auto path = layout.manifest(id);
  if (::access(path.c_str(), F_OK) != 0) {
    return make_error(Errc::not_found, "checkpoint " + id.hex() + " does not exist");
  }
  // Tags first: a crash in between leaves the checkpoint, not a tag naming nothing.
  GCR_TRY_ASSIGN(auto tags, read_tags(layout));
  for (const auto& [name, tagged] : tags) {
    if (tagged == id) GCR_TRY(io::remove_file(layout.tags() / name));
  }
  GCR_TRY(io::sync_dir(layout.tags()));
  GCR_TRY(io::remove_file(path));
  return io::sync_dir(layout.manifests());
}

Status Store::tag(const CheckpointId& id, std::string_view name) {
  const Layout& layout = impl_->state->layout;
  GCR_TRY(layout.tag(name));
  if (::access(layout.manifest(id).c_str(), F_OK) != 0) {
    return make_error(Errc::not_found, "checkpoint " + id.hex() + " does not exist");
  }
  return write_tag(layout, name, id);
}

Result<GcReport> Store::gc() {
  return collect_garbage(*impl_->state);
}

Result<VerifyReport> Store::verify(
    std::optional<CheckpointId> id,
    std::function<void(std::uint64_t done, std::uint64_t total)> progress) {
  return verify_store(*impl_->state, id, progress);
}

Result<Usage> Store::usage(std::optional<CheckpointId> id) const {
  return store_usage(*impl_->state, id);
}

}  // namespace gcr::store
