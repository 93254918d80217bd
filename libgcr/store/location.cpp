// Store locations: see gcr/store_location.h.
#include "gcr/store_location.h"

#include <pwd.h>

namespace gcr::store {
namespace {

bool bucket_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
}

bool prefix_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

std::string shown(std::string_view text) {
  std::string s(text.substr(0, 200));
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return s;
}

// "scheme" when text starts with "scheme://" (RFC 3986 scheme characters).
std::optional<std::string> scheme_of(std::string_view text) {
  auto colon = text.find("://");
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  std::string_view s = text.substr(0, colon);
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  if (!alpha(s[0])) return std::nullopt;
  for (char c : s) {
    if (!alpha(c) && !(c >= '0' && c <= '9') && c != '+' && c != '-' && c != '.') {
      return std::nullopt;
    }
  }
  std::string lower(s);
  for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return lower;
}

Result<StoreLocation> parse_s3(std::string_view whole, std::string_view rest) {
  auto bad = [&](const std::string& why) -> Error {
    return Error{Errc::invalid_argument, "store location '" + shown(whole) + "': " + why +
                                             "; write it s3://BUCKET or s3://BUCKET/PREFIX"};
  };
  StoreLocation loc;
  loc.kind = StoreLocation::Kind::s3;
  auto slash = rest.find('/');
  loc.bucket = std::string(rest.substr(0, slash));
  if (loc.bucket.size() < 3 || loc.bucket.size() > 63) {
    return bad("bucket name '" + shown(loc.bucket) + "' is not 3-63 characters");
  }
  for (char c : loc.bucket) {
    if (!bucket_char(c)) return bad("bucket name '" + shown(loc.bucket) + "' has '" + c + "'");
  }
  std::string_view prefix = slash == std::string_view::npos ? "" : rest.substr(slash + 1);
  while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
  std::size_t start = 0;
  while (start < prefix.size()) {
    auto end = prefix.find('/', start);
    if (end == std::string_view::npos) end = prefix.size();
    std::string_view part = prefix.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") {
      return bad("prefix '" + shown(prefix) + "' has an empty, '.' or '..' component");
    }
    for (char c : part) {
      if (!prefix_char(c)) {
        return bad("prefix '" + shown(prefix) + "' has '" + shown(std::string(1, c)) +
                   "' (use [A-Za-z0-9._-] and '/')");
      }
    }
    start = end + 1;
  }
  loc.prefix = std::string(prefix);
  return loc;
}

}  // namespace

std::string StoreLocation::text() const {
  if (kind == Kind::directory) return directory.string();
  return "s3://" + bucket + (prefix.empty() ? "" : "/" + prefix);
}

Result<StoreLocation> parse_store_location(std::string_view text,
                                           const std::filesystem::path& cwd) {
  if (text.empty()) return make_error(Errc::invalid_argument, "empty store location");
  if (text.find('\0') != std::string_view::npos) {
    return make_error(Errc::invalid_argument, "store location holds a NUL byte");
  }
  std::string_view path = text;
  if (auto scheme = scheme_of(text)) {
    std::string_view rest = text.substr(scheme->size() + 3);
    if (*scheme == "s3") return parse_s3(text, rest);
    if (*scheme != "file" || !rest.starts_with('/')) {
      return make_error(Errc::invalid_argument,
                        "store location '" + shown(text) + "': gcr knows stores at s3://BUCKET/" +
                            "PREFIX and in local directories (a path, or file:///path), not '" +
                            shown(*scheme) + "://'");
    }
    path = rest;
  }
  StoreLocation loc;
  std::filesystem::path p(path);
  if (p.is_relative()) {
    if (cwd.empty() || cwd.is_relative()) {
      return make_error(Errc::invalid_argument, "store location '" + shown(text) +
                                                    "' is relative and there is no working "
                                                    "directory to resolve it against");
    }
    p = cwd / p;
  }
  loc.directory = p.lexically_normal();
  // "/a/b/" normalizes to "/a/b/"; the store is the directory itself.
  if (loc.directory.has_parent_path() && loc.directory.filename().empty()) {
    loc.directory = loc.directory.parent_path();
  }
  return loc;
}

std::optional<LocatedName> split_store_url_and_name(std::string_view text) {
  auto scheme = scheme_of(text);
  if (!scheme || *scheme != "s3") return std::nullopt;
  std::string_view rest = text.substr(5);
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  auto last = rest.rfind('/');
  if (last == std::string_view::npos) return std::nullopt;
  auto store = parse_s3(text, rest.substr(0, last));
  if (!store) return std::nullopt;
  return LocatedName{std::move(store).value(), std::string(rest.substr(last + 1))};
}

std::filesystem::path default_cache_dir_from(const char* gcr_cache_dir, const char* xdg_cache_home,
                                             const char* home, uid_t euid) {
  if (gcr_cache_dir != nullptr && *gcr_cache_dir != '\0') return gcr_cache_dir;
  if (euid == 0) return "/var/cache/gcr";
  if (xdg_cache_home != nullptr && xdg_cache_home[0] == '/') {
    return std::filesystem::path(xdg_cache_home) / "gcr";
  }
  std::string h = home != nullptr ? home : "";
  if (h.empty()) {
    if (const passwd* pw = ::getpwuid(euid); pw != nullptr && pw->pw_dir != nullptr) h = pw->pw_dir;
  }
  if (h.empty()) h = "/";
  return std::filesystem::path(h) / ".cache" / "gcr";
}

}  // namespace gcr::store
