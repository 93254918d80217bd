// The cache of remote stores: see gcr/remote_cache.h.
#include "gcr/remote_cache.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <vector>

#include "gcr/file.h"
#include "gcr/store.h"
#include "store/layout.h"

namespace gcr::store {

std::filesystem::path remote_cache_dir(const std::filesystem::path& cache_dir,
                                       std::string_view endpoint, const StoreLocation& location) {
  std::string identity = std::string(endpoint) + "\n" + location.text();
  ChunkId h = chunk_id_of(std::as_bytes(std::span(identity.data(), identity.size())));
  auto dir = cache_dir / "s3" / h.hex().substr(0, 16);
  std::error_code ec;
  if (!std::filesystem::exists(dir / "location", ec)) {
    (void)io::make_dir(cache_dir);
    (void)io::make_dir(cache_dir / "s3");
    (void)io::make_dir(dir);
    std::string text = identity + "\n";
    (void)io::write_file_durably(dir / (Id128::random().hex() + ".tmp"), dir / "location",
                                 std::as_bytes(std::span(text.data(), text.size())));
  }
  return dir;
}

void touch_cached_checkpoint(const std::filesystem::path& store, const CheckpointId& id) {
  Layout layout{store};
  (void)::utimensat(AT_FDCWD, layout.manifest(id).c_str(), nullptr, 0);
}

Result<std::uint64_t> trim_cache_store(const std::filesystem::path& root, std::uint64_t max_bytes,
                                       const CheckpointId& keep) {
  StoreOptions options;
  options.root = root;
  GCR_TRY_ASSIGN(auto store, Store::open(options, /*create=*/false));
  GCR_TRY_ASSIGN(Usage usage, store->usage(std::nullopt));
  if (usage.pack_file_bytes <= max_bytes) return std::uint64_t{0};
  GCR_TRY_ASSIGN(auto listed, store->list());
  Layout layout{root};
  std::vector<std::pair<std::int64_t, CheckpointId>> by_age;
  for (const auto& c : listed) {
    if (c.id == keep) continue;
    struct stat st {};
    if (::stat(layout.manifest(c.id).c_str(), &st) != 0) continue;
    by_age.emplace_back(
        static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec, c.id);
  }
  std::sort(by_age.begin(), by_age.end());
  std::uint64_t removed = 0;
  for (const auto& [age, id] : by_age) {
    GCR_TRY(store->remove(id));
    ++removed;
    GCR_TRY(store->gc());
    GCR_TRY_ASSIGN(usage, store->usage(std::nullopt));
    if (usage.pack_file_bytes <= max_bytes) break;
  }
  if (removed == 0) GCR_TRY(store->gc());
  return removed;
}

}  // namespace gcr::store
