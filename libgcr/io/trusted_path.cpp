// gcr/trusted_path.h.
#include "gcr/trusted_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <set>
#include <string>

namespace gcr {

namespace {

// Writable by someone other than root: the world, or a group other than root's (umask 002).
bool others_may_write(const struct stat& st) {
  return (st.st_mode & S_IWOTH) || ((st.st_mode & S_IWGRP) && st.st_gid != 0);
}

}  // namespace

bool only_root_can_change(const std::filesystem::path& path) {
  if (!path.is_absolute()) return false;
  struct stat st {};
  if (::lstat("/", &st) != 0 || st.st_uid != 0 || others_may_write(st)) return false;
  // Walked by hand, links followed as the kernel would: every link on the way and every directory
  // a link leads through must be root's as much as the path's own (/bin -> usr/bin is).
  const std::filesystem::path relative = path.relative_path();
  std::deque<std::filesystem::path> rest(relative.begin(), relative.end());
  std::filesystem::path at = "/";
  bool sticky_parent = false, is_dir = true;
  for (int links = 0; !rest.empty();) {
    std::filesystem::path part = rest.front();
    rest.pop_front();
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      at = at.parent_path();
      sticky_parent = false;  // its own parent was checked on the way down
      continue;
    }
    std::filesystem::path next = at / part;
    // Missing: only who may write its parent can make it, and that is root but in a sticky one.
    if (::lstat(next.c_str(), &st) != 0) return errno == ENOENT && !sticky_parent;
    if (st.st_uid != 0) return false;
    if (S_ISLNK(st.st_mode)) {
      if (sticky_parent || ++links > 40) return false;  // another may have made it (or a loop)
      std::error_code ec;
      std::filesystem::path target = std::filesystem::read_symlink(next, ec);
      if (ec) return false;
      if (target.is_absolute()) at = "/";
      const std::filesystem::path inside = target.relative_path();
      rest.insert(rest.begin(), inside.begin(), inside.end());
      continue;
    }
    const bool sticky = S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX);
    if (others_may_write(st) && !sticky) return false;
    at = next;
    sticky_parent = sticky;
    is_dir = S_ISDIR(st.st_mode);
  }
  return !sticky_parent || !is_dir;  // a sticky directory itself is anyone's to fill
}

std::optional<std::filesystem::path> path_for_root(
    const char* name, const std::optional<std::filesystem::path>& value) {
  if (!value || value->empty()) return std::nullopt;
  const std::filesystem::path& p = *value;
  if (::geteuid() != 0) return p;
  std::error_code ec;
  std::filesystem::path absolute = std::filesystem::absolute(p, ec);
  if (!ec && only_root_can_change(absolute)) return p;
  static std::mutex mu;
  static std::set<std::string> said;
  std::lock_guard lock(mu);
  if (said.insert(name).second)
    std::fprintf(
        stderr,
        "gcr: %s=%s ignored: as root, gcr runs or loads only what only root can change "
        "(owned by root, in directories others cannot write, through links of root's alone)\n",
        name, p.c_str());
  return std::nullopt;
}

std::optional<std::filesystem::path> env_path_for_root(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return path_for_root(name, std::filesystem::path(v));
}

}  // namespace gcr
