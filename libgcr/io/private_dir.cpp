// Private directories (gcr/private_dir.h, Note [Private directories]).
#include "gcr/private_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

namespace gcr::io {
namespace fs = std::filesystem;

namespace {

std::string mode_text(mode_t m) {
  char b[8];
  std::snprintf(b, sizeof b, "%04o", static_cast<unsigned>(m & 07777));
  return b;
}

// An ancestor we pass through: root's or ours, and nobody else may rename its entries.
Status check_ancestor(const struct stat& st, const fs::path& dir, uid_t uid) {
  if (st.st_uid != 0 && st.st_uid != uid)
    return Error{Errc::permission_denied, "'" + dir.string() + "' belongs to uid " +
                                              std::to_string(st.st_uid) +
                                              ", neither root nor uid " + std::to_string(uid) +
                                              ": gcr keeps no private state under it"};
  if ((st.st_mode & 022) && !(st.st_mode & S_ISVTX))
    return Error{Errc::permission_denied, "'" + dir.string() + "' (mode " + mode_text(st.st_mode) +
                                              ") is writable by other users and not sticky: "
                                              "gcr keeps no private state under it"};
  return ok();
}

// The directory itself: ours alone.
Status check_own(const struct stat& st, const fs::path& dir, uid_t uid) {
  if (!S_ISDIR(st.st_mode))
    return Error{Errc::permission_denied, "'" + dir.string() + "' is not a directory"};
  if (st.st_uid != uid)
    return Error{Errc::permission_denied,
                 "'" + dir.string() + "' belongs to uid " + std::to_string(st.st_uid) +
                     ", not to uid " + std::to_string(uid) +
                     " (did another user create it first?); remove it or choose another "
                     "directory (GCR_WORK_DIR, GCR_GCRD_SOCKET, XDG_RUNTIME_DIR)"};
  if (st.st_mode & 022)
    return Error{Errc::permission_denied,
                 "'" + dir.string() + "' (mode " + mode_text(st.st_mode) +
                     ") is writable by other users; remove it or make it 0700 yourself"};
  return ok();
}

fs::path absolute_of(const fs::path& path) {
  std::error_code ec;
  fs::path abs = fs::absolute(path, ec);
  if (ec) abs = path;
  // Resolve what exists (root's symlinks such as /var/run -> /run); what follows is walked with
  // O_NOFOLLOW, so a symlink swapped in later is an error, not a detour.
  fs::path canon = fs::weakly_canonical(abs, ec);
  return ec ? abs.lexically_normal() : canon;
}

Error open_error(const fs::path& dir, int err) {
  if (err == ELOOP || err == ENOTDIR)
    return Error{Errc::permission_denied,
                 "'" + dir.string() + "' is a symlink or not a directory: refused"};
  if (err == ENOENT) return Error{Errc::not_found, "'" + dir.string() + "' does not exist"};
  return errno_error("opening directory '" + dir.string() + "'", err);
}

}  // namespace

Result<UniqueFd> open_private_dir(const fs::path& path, bool create) {
  const uid_t uid = geteuid();
  fs::path abs = absolute_of(path);
  std::vector<std::string> parts;
  for (const auto& p : abs.relative_path()) parts.push_back(p.string());
  if (parts.empty()) return Error{Errc::invalid_argument, "'/' cannot be a private directory"};
  UniqueFd cur(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!cur) return errno_error("opening /");
  fs::path at = "/";
  for (std::size_t i = 0; i < parts.size(); ++i) {
    struct stat st {};
    if (::fstat(cur.get(), &st) != 0) return errno_error("fstat '" + at.string() + "'");
    GCR_TRY(check_ancestor(st, at, uid));
    fs::path next = at / parts[i];
    // O_PATH: search permission is enough to pass through (a 0711 parent); the last one is opened
    // for real, to be fchmod()ed, flock()ed and listed.
    const int flags =
        (i + 1 < parts.size() ? O_PATH : O_RDONLY) | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    UniqueFd fd(::openat(cur.get(), parts[i].c_str(), flags));
    if (!fd && errno == ENOENT && create) {
      if (::mkdirat(cur.get(), parts[i].c_str(), 0700) != 0 && errno != EEXIST)
        return errno_error("creating directory '" + next.string() + "'");
      fd = UniqueFd(::openat(cur.get(), parts[i].c_str(), flags));
    }
    if (!fd) return open_error(next, errno);
    cur = std::move(fd);
    at = next;
  }
  struct stat st {};
  if (::fstat(cur.get(), &st) != 0) return errno_error("fstat '" + at.string() + "'");
  GCR_TRY(check_own(st, at, uid));
  if ((st.st_mode & 077) && ::fchmod(cur.get(), 0700) != 0)
    return errno_error("making '" + at.string() + "' 0700");
  return cur;
}

Status check_trusted_parent(const fs::path& path, uid_t uid) {
  fs::path abs = absolute_of(path);
  fs::path at = "/";
  std::vector<std::string> parts;
  for (const auto& p : abs.parent_path().relative_path()) parts.push_back(p.string());
  for (std::size_t i = 0; i <= parts.size(); ++i) {
    struct stat st {};
    if (::lstat(at.c_str(), &st) != 0) return open_error(at, errno);
    if (S_ISLNK(st.st_mode)) return open_error(at, ELOOP);
    if (i == parts.size() && (st.st_mode & 022))  // sticky or not: the name could be squatted
      return Error{Errc::permission_denied, "the directory of gcrd's socket, '" + at.string() +
                                                "' (mode " + mode_text(st.st_mode) +
                                                "), is writable by other users: not trusted"};
    GCR_TRY(check_ancestor(st, at, uid));
    if (i < parts.size()) at /= parts[i];
  }
  return ok();
}

Result<UniqueFd> open_private_file(int dir, const std::string& name, int flags) {
  UniqueFd fd(::openat(dir, name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) {
    if (errno == ELOOP)
      return Error{Errc::permission_denied, "'" + name + "' is a symlink: refused"};
    return errno_error("opening '" + name + "'");
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_error("fstat '" + name + "'");
  if (!S_ISREG(st.st_mode) || st.st_uid != geteuid())
    return Error{Errc::permission_denied, "'" + name + "' is not a regular file of uid " +
                                              std::to_string(geteuid()) + ": refused"};
  return fd;
}

}  // namespace gcr::io
