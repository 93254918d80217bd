// Where a store lives (docs/image-format.md §1, §8): a local directory, named by an absolute path,
// or an S3-compatible bucket, named by a URL `s3://BUCKET[/PREFIX]`. What --store, GCR_STORE and
// the `gcr image push/pull` arguments name, parsed once by the client: a relative path becomes
// absolute against the client's working directory (gcrd never sees one), and a URL of a scheme
// gcr does not know is an error rather than a directory called "scheme:".
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "gcr/result.h"

namespace gcr::store {

struct StoreLocation {
  enum class Kind { directory, s3 };
  Kind kind = Kind::directory;
  std::filesystem::path directory;  // directory: absolute, lexically normal
  std::string bucket;               // s3
  std::string prefix;               // s3: "" or "a/b" (no leading or trailing '/')

  bool is_s3() const { return kind == Kind::s3; }
  // The canonical spelling: "/abs/dir" or "s3://bucket/prefix".
  std::string text() const;
};

// Parses a store location. Accepted: an absolute path; a relative one (made absolute against
// `cwd`); file:///abs/path; s3://BUCKET and s3://BUCKET/PREFIX (BUCKET 3-63 of [a-z0-9.-], PREFIX
// components of [A-Za-z0-9._-], none "." or ".."). Anything else of the form SCHEME://… is
// invalid_argument, naming the schemes gcr knows.
Result<StoreLocation> parse_store_location(std::string_view text, const std::filesystem::path& cwd);

// `gcr restore s3://BUCKET/PREFIX/NAME`: a location whose last component is a checkpoint name.
// nullopt when `text` is not an s3 URL with at least a bucket and a name.
struct LocatedName {
  StoreLocation store;
  std::string name;
};
std::optional<LocatedName> split_store_url_and_name(std::string_view text);

// Where gcr keeps what it caches of remote stores: GCR_CACHE_DIR, else for euid 0 /var/cache/gcr,
// else $XDG_CACHE_HOME/gcr (when absolute), else $HOME/.cache/gcr. Arguments may be null (unset).
std::filesystem::path default_cache_dir_from(const char* gcr_cache_dir, const char* xdg_cache_home,
                                             const char* home, uid_t euid);

}  // namespace gcr::store
