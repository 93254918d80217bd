// Store layout, names and location: see layout.h. valid_tag (gcr/store.h) lives here too.
#include "store/layout.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "gcr/file.h"
#include "gcr/store.h"

namespace gcr::store {

bool valid_tag(std::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  auto alnum = [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
  };
  if (!alnum(name[0])) return false;
  for (char c : name.substr(1)) {
    if (!alnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

std::filesystem::path Layout::tmp_file(std::string_view suffix) const {
  return tmp() / (Id128::random().hex() + "." + std::string(suffix));
}

Result<std::filesystem::path> Layout::tag(std::string_view name) const {
  if (!valid_tag(name)) {
    std::string shown(name.substr(0, 64));
    for (char& c : shown) {
      if (static_cast<unsigned char>(c) < 0x20) c = '?';
    }
    return make_error(Errc::invalid_argument,
                      "'" + shown +
                          "' is not a valid checkpoint name: use 1-128 of [A-Za-z0-9._-], "
                          "starting with a letter or digit");
  }
  return tags() / std::string(name);
}

std::optional<Id128> id_from_file_name(const std::string& name, std::string_view ext) {
  if (name.size() != 33 + ext.size() || name[32] != '.' || name.substr(33) != ext) return {};
  auto id = Id128::from_hex(std::string_view(name).substr(0, 32));
  // Only the canonical lowercase spelling: a file "ABC….pack" is not ours.
  if (id && id->hex() != name.substr(0, 32)) return {};
  return id;
}

namespace {

constexpr std::string_view kMarkerPrefix = "gcr-store ";

Status check_marker(const Layout& layout) {
  GCR_TRY_ASSIGN(auto bytes, io::read_file(layout.marker(), 4096));
  std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  std::string origin = "'" + layout.marker().string() + "'";
  if (!text.starts_with(kMarkerPrefix) || text.back() != '\n') {
    return make_error(Errc::corrupt_image, origin + " is not a gcr STORE marker");
  }
  std::string version = text.substr(kMarkerPrefix.size(), text.size() - kMarkerPrefix.size() - 1);
  int major = 0;
  for (char c : version) {
    if (c < '0' || c > '9' || major > 100000) {
      return make_error(Errc::corrupt_image, origin + ": bad store version '" + version + "'");
    }
    major = major * 10 + (c - '0');
  }
  if (major > kStoreMajor) {
    return make_error(Errc::unsupported, origin + ": store format " + std::to_string(major) +
                                             " is newer than this gcr's " +
                                             std::to_string(kStoreMajor) + "; upgrade gcr");
  }
  if (major != kStoreMajor) {
    return make_error(Errc::corrupt_image, origin + ": store format " + version + " unknown");
  }
  return ok();
}

// Empty, or holding only what prepare_store itself makes: another process creating the same store
// right now (or one that crashed while it did). Creation is idempotent, so both carry on.
bool empty_or_store_skeleton(const std::filesystem::path& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name != "packs" && name != "manifests" && name != "tags" && name != "tmp" &&
        name != "gc.lock" && name != "STORE") {
      return false;
    }
  }
  return !ec;
}

// mkdir -p with 0700 for every directory it creates.
Status make_dirs(const std::filesystem::path& dir) {
  std::filesystem::path built;
  for (const auto& part : dir) {
    built /= part;
    if (part == "/" || part.empty()) continue;
    GCR_TRY(io::make_dir(built));
  }
  return ok();
}

}  // namespace

Status prepare_store(const Layout& layout, bool create) {
  struct stat st {};
  bool exists = ::stat(layout.root.c_str(), &st) == 0;
  if (!exists && errno != ENOENT) return io::file_error("cannot open store", layout.root, errno);
  if (exists && !S_ISDIR(st.st_mode)) {
    return make_error(Errc::invalid_argument,
                      "'" + layout.root.string() + "' is not a directory, so not a gcr store");
  }
  if (exists && ::access(layout.marker().c_str(), F_OK) == 0) {
    GCR_TRY(check_marker(layout));
    if (!create) return ok();
    // A store made by an older run may lack a directory (created lazily); make them all.
    for (const auto& d : {layout.packs(), layout.manifests(), layout.tags(), layout.tmp()}) {
      GCR_TRY(io::make_dir(d));
    }
    return ok();
  }
  if (exists && errno == EACCES) return io::file_error("cannot open store", layout.root, EACCES);
  if (!create) {
    return make_error(Errc::not_found, "no gcr store at '" + layout.root.string() +
                                           "'; create one by writing a checkpoint, or set "
                                           "GCR_STORE to the store's directory");
  }
  if (exists && !empty_or_store_skeleton(layout.root)) {
    return make_error(Errc::invalid_argument,
                      "'" + layout.root.string() +
                          "' exists, is not empty and has no STORE marker: not a gcr store; "
                          "choose an empty or new directory");
  }
  GCR_TRY(make_dirs(layout.root));
  for (const auto& d : {layout.packs(), layout.manifests(), layout.tags(), layout.tmp()}) {
    GCR_TRY(io::make_dir(d));
  }
  std::string text = std::string(kMarkerPrefix) + std::to_string(kStoreMajor) + "\n";
  // Two processes may create the store at once: each renames a complete marker into place.
  GCR_TRY(io::write_file_durably(layout.tmp_file("store"), layout.marker(),
                                 std::as_bytes(std::span(text.data(), text.size()))));
  GCR_TRY(io::sync_dir(layout.root));
  return ok();
}

std::filesystem::path default_root_from(const char* gcr_store, const char* xdg_data_home,
                                        const char* home, uid_t euid) {
  if (gcr_store != nullptr && *gcr_store != '\0') return gcr_store;
  if (euid == 0) return "/var/lib/gcr/store";
  if (xdg_data_home != nullptr && xdg_data_home[0] == '/') {
    return std::filesystem::path(xdg_data_home) / "gcr" / "store";
  }
  std::string h = home != nullptr ? home : "";
  if (h.empty()) {
    if (const passwd* pw = ::getpwuid(euid); pw != nullptr && pw->pw_dir != nullptr) h = pw->pw_dir;
  }
  if (h.empty()) h = "/";
  return std::filesystem::path(h) / ".local" / "share" / "gcr" / "store";
}

}  // namespace gcr::store
