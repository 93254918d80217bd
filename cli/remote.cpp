// Remote stores from the command line: see remote.h.
#include "remote.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "gcr/human_output.h"
#include "gcr/remote_cache.h"
#include "gcr/settings.h"

namespace gcr::cli {

std::filesystem::path cache_dir() {
  const auto& configured = settings().cache_dir;  // GCR_CACHE_DIR
  return store::default_cache_dir_from(configured ? configured->c_str() : nullptr,
                                       std::getenv("XDG_CACHE_HOME"), std::getenv("HOME"),
                                       ::geteuid());
}

Result<std::unique_ptr<store::Backend>> open_location(const store::StoreLocation& location,
                                                      bool create) {
  store::BackendOptions options;
  options.create = create;
  if (location.is_s3()) options.cache_dir = cache_dir();
  auto backend = store::open_backend(location, options);
  if (!backend) return std::move(backend).context("opening image store " + location.text());
  return backend;
}

std::filesystem::path cache_store_of(const store::Backend& remote) {
  return remote.local_cache() / "store";
}

Result<store::TransferReport> push_from_cache(store::Backend& remote, const std::string& id_hex,
                                              std::optional<std::string> tag, bool progress) {
  auto id = store::Id128::from_hex(id_hex);
  if (!id) return make_error(Errc::protocol, "gcrd named checkpoint '" + id_hex + "'");
  store::BackendOptions options;
  GCR_TRY_ASSIGN(auto local, store::open_dir_backend(cache_store_of(remote), options));
  store::TransferOptions t;
  t.tag = std::move(tag);
  ProgressLine line(progress, "uploading to " + remote.name());
  t.progress = [&line](std::uint64_t done, std::uint64_t total) { line.update(done, total); };
  return store::copy_checkpoint(*local, remote, *id, t);
}

Result<store::TransferReport> pull_into_cache(store::Backend& remote, std::string_view name,
                                              bool progress) {
  GCR_TRY_ASSIGN(store::CheckpointId id, store::resolve_checkpoint(remote, name));
  store::BackendOptions options;
  options.create = true;
  GCR_TRY_ASSIGN(auto local, store::open_dir_backend(cache_store_of(remote), options));
  store::TransferOptions t;
  ProgressLine line(progress, "downloading from " + remote.name());
  t.progress = [&line](std::uint64_t done, std::uint64_t total) { line.update(done, total); };
  GCR_TRY_ASSIGN(auto report, store::copy_checkpoint(remote, *local, id, t));
  store::touch_cached_checkpoint(cache_store_of(remote), id);
  return report;
}

void trim_cache(const std::filesystem::path& cache_store, const store::CheckpointId& keep) {
  // Bounded by GCR_CACHE_MAX_BYTES.
  auto removed = store::trim_cache_store(cache_store, settings().cache_max_bytes, keep);
  if (!removed) {
    std::fprintf(stderr, "gcr: warning: trimming the cache %s: %s\n", cache_store.c_str(),
                 removed.error().message.c_str());
  }
}

}  // namespace gcr::cli
