// The S3 Backend (gcr/store_backend.h): a store's objects under s3://BUCKET/PREFIX/, named as the
// files of a store directory are (docs/image-format.md §8). create_only is a PUT with
// If-None-Match: *.
//
// Opening checks the STORE marker (creating it, once, when asked: the conditional PUT makes two
// concurrent first writers agree), then checks that the bucket honours If-None-Match by putting
// the marker again conditionally: it must be refused. A bucket that overwrites instead would let
// two writers both "commit" one name, so it is refused (unsupported) before anything is written.
//
// Pack indexes are immutable and read by every transfer: with a cache_dir, each one read is kept
// in the bucket's cache directory (remote_cache.h: idx/<P>.idx) and read from there next time.
#include <cstdlib>

#include "gcr/file.h"
#include "gcr/remote_cache.h"
#include "gcr/settings.h"
#include "gcr/store_backend.h"
#include "store/bytes.h"
#include "store/layout.h"
#include "store/s3_client.h"

namespace gcr::store {
namespace {

constexpr std::string_view kMarkerText = "gcr-store 1\n";

bool is_index_key(const std::string& key) {
  return key.starts_with("packs/") && key.ends_with(".idx") &&
         id_from_file_name(key.substr(6), "idx").has_value();
}

class S3Backend final : public Backend {
 public:
  S3Backend(S3Config config, const StoreLocation& location, std::filesystem::path cache_dir)
      : client_(std::move(config), location.bucket),
        prefix_(location.prefix.empty() ? "" : location.prefix + "/"),
        name_(location.text()),
        cache_dir_(std::move(cache_dir)) {}

  const std::string& name() const override { return name_; }

  Result<std::vector<std::string>> list(const std::string& dir) override {
    GCR_TRY_ASSIGN(DirListing listing, list_detailed(dir));
    std::vector<std::string> names;
    for (auto& o : listing.objects) names.push_back(std::move(o.name));
    return names;
  }

  Result<DirListing> list_detailed(const std::string& dir) override {
    std::string start = prefix_ + dir + "/";
    GCR_TRY_ASSIGN(S3Listing listing, client_.list_objects(start));
    DirListing out;
    out.now_unix = listing.now_unix;
    for (auto& o : listing.objects) {
      std::string rest = o.key.substr(start.size());
      if (rest.empty() || rest.find('/') != std::string::npos) continue;
      out.objects.push_back(ObjectInfo{std::move(rest), o.size, o.modified_unix});
    }
    return out;
  }

  Result<Versioned> get_versioned(const std::string& key, std::uint64_t max_bytes) override {
    GCR_TRY_ASSIGN(S3Versioned v, client_.get_object_versioned(prefix_ + key, max_bytes));
    if (v.etag.empty()) {
      return make_error(Errc::protocol, name_ + "/" + key + ": the endpoint sent no ETag");
    }
    return Versioned{std::move(v.bytes), std::move(v.etag)};
  }

  Status put_if(const std::string& key, std::span<const std::byte> bytes,
                const std::string& version) override {
    Status s = version.empty() ? client_.put_object(prefix_ + key, bytes, /*if_none_match=*/true)
                               : client_.put_object_if_match(prefix_ + key, bytes, version);
    if (s || s.error().code != Errc::already_exists) return s;
    return make_error(Errc::busy, name_ + "/" + key + " changed while gcr was writing it");
  }

  Result<std::vector<std::byte>> get(const std::string& key, std::uint64_t max_bytes) override {
    bool cacheable = !cache_dir_.empty() && is_index_key(key);
    auto cached = cache_dir_ / "idx" / key.substr(std::min<std::size_t>(6, key.size()));
    if (cacheable) {
      if (auto bytes = io::read_file(cached, max_bytes)) return bytes;
    }
    GCR_TRY_ASSIGN(auto bytes, client_.get_object(prefix_ + key, max_bytes));
    if (cacheable && io::make_dir(cache_dir_) && io::make_dir(cache_dir_ / "idx")) {
      auto tmp = cache_dir_ / "idx" / (Id128::random().hex() + ".tmp");
      (void)io::write_file_durably(tmp, cached, bytes);  // a cache: losing it costs a GET
    }
    return bytes;
  }

  Status get_range(const std::string& key, std::uint64_t offset,
                   std::span<std::byte> out) override {
    return client_.get_object_range(prefix_ + key, offset, out);
  }

  Status put(const std::string& key, std::span<const std::byte> bytes, PutMode mode) override {
    const std::span<const std::byte> whole[] = {bytes};
    return put_parts(key, whole, mode);
  }

  // The body sent from the parts where they are: a pushed pack is never joined in memory.
  Status put_parts(const std::string& key, std::span<const std::span<const std::byte>> parts,
                   PutMode mode) override {
    Status s = client_.put_object_parts(prefix_ + key, parts, mode == PutMode::create_only);
    if (s || s.error().code != Errc::already_exists) return s;
    // Refused because it exists: ours, when an earlier attempt of this PUT went through but its
    // answer was lost (a retry), or a concurrent writer's copy of the same object; either way
    // done if the bytes are these.
    std::uint64_t size = 0;
    for (std::span<const std::byte> p : parts) size += p.size();
    auto there = client_.get_object(prefix_ + key, size);
    if (there && is_concatenation(*there, parts)) return ok();
    return make_error(Errc::already_exists, name_ + "/" + key + " exists");
  }

  Status remove(const std::string& key) override { return client_.delete_object(prefix_ + key); }

  unsigned parallelism() const override { return client_.config().parallelism; }
  std::filesystem::path local_cache() const override { return cache_dir_; }

  // The marker, created when asked; then the conditional-write check.
  Status open_store(bool create) {
    std::string what = "store " + name_;
    auto marker = client_.get_object(prefix_ + "STORE", 4096);
    if (!marker) {
      Error e = std::move(marker).error();
      bool missing_marker =
          e.code == Errc::not_found && e.message.find("NoSuchBucket") == std::string::npos;
      if (!missing_marker) return e;
      if (!create) {
        return make_error(Errc::not_found, "no gcr store at " + name_ +
                                               " (no STORE object); a checkpoint or push to it "
                                               "creates one");
      }
      auto text = std::as_bytes(std::span(kMarkerText.data(), kMarkerText.size()));
      GCR_TRY(put("STORE", text, PutMode::create_only));
    } else {
      std::string text(reinterpret_cast<const char*>(marker->data()), marker->size());
      if (text != kMarkerText) {
        if (text.starts_with("gcr-store ")) {
          return make_error(Errc::unsupported,
                            what + ": STORE says '" + text.substr(0, 40) +
                                "', a format this gcr (store format 1) does not know; upgrade gcr");
        }
        return make_error(Errc::corrupt_image, what + ": STORE is not a gcr store marker");
      }
    }
    auto text = std::as_bytes(std::span(kMarkerText.data(), kMarkerText.size()));
    Status probe = client_.put_object(prefix_ + "STORE", text, /*if_none_match=*/true);
    if (probe) {
      return make_error(Errc::unsupported,
                        "bucket " + client_.bucket() + " at " + client_.config().endpoint +
                            " ignores If-None-Match on PUT (it overwrote an existing object), so "
                            "two writers could commit over each other; gcr needs an S3 service "
                            "with conditional writes");
    }
    if (probe.error().code != Errc::already_exists) return std::move(probe).error();
    return ok();
  }

 private:
  S3Client client_;
  std::string prefix_, name_;
  std::filesystem::path cache_dir_;
};

}  // namespace

Result<std::unique_ptr<Backend>> open_s3_backend(const StoreLocation& location,
                                                 const BackendOptions& options) {
  GCR_TRY_ASSIGN(S3Config config, load_s3_config(env_lookup));
  std::filesystem::path cache;
  if (!options.cache_dir.empty()) {
    cache = remote_cache_dir(options.cache_dir, config.endpoint, location);
  }
  auto backend = std::make_unique<S3Backend>(std::move(config), location, cache);
  GCR_TRY(backend->open_store(options.create));
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace gcr::store
