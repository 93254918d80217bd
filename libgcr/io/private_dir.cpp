// Private directories (gcr/private_dir.h, Note [Private directories]).
#include "gcr/private_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
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

Error open_error(const fs::path& dir, int err) {
  if (err == ELOOP || err == ENOTDIR)
    return Error{Errc::permission_denied,
                 "'" + dir.string() + "' is a symlink or not a directory: refused"};
  if (err == ENOENT) return Error{Errc::not_found, "'" + dir.string() + "' does not exist"};
  return errno_error("opening directory '" + dir.string() + "'", err);
}

void push_front(std::deque<std::string>& todo, const fs::path& p) {
  std::vector<std::string> parts;
  for (const auto& c : p.relative_path()) parts.push_back(c.string());
  todo.insert(todo.begin(), parts.begin(), parts.end());
}

// Opens `path` one component at a time (O_NOFOLLOW), checking every directory it looks a name up
// in (check_ancestor). A symlink is followed only when root or `uid` owns it: in a directory that
// passed the check, nobody else could have put it there (the kernel's protected_symlinks rule).
// The last directory is opened O_RDONLY when `readable`, else O_PATH.
Result<UniqueFd> walk(const fs::path& path, bool create, bool readable, uid_t uid, fs::path* at) {
  std::error_code ec;
  fs::path abs = fs::absolute(path, ec);
  if (ec) abs = path;
  std::deque<std::string> todo;
  push_front(todo, abs);
  if (todo.empty()) return Error{Errc::invalid_argument, "'/' cannot be a private directory"};
  UniqueFd cur(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!cur) return errno_error("opening /");
  *at = "/";
  int links = 0;
  while (!todo.empty()) {
    std::string name = std::move(todo.front());
    todo.pop_front();
    if (name.empty() || name == ".") continue;
    struct stat st {};
    if (::fstat(cur.get(), &st) != 0) return errno_error("fstat '" + at->string() + "'");
    GCR_TRY(check_ancestor(st, *at, uid));
    fs::path next = name == ".." ? at->parent_path() : *at / name;
    struct stat lst {};
    if (::fstatat(cur.get(), name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno != ENOENT || !create || name == "..") return open_error(next, errno);
      if (::mkdirat(cur.get(), name.c_str(), 0700) != 0 && errno != EEXIST)
        return errno_error("creating directory '" + next.string() + "'");
    } else if (S_ISLNK(lst.st_mode)) {
      if (lst.st_uid != 0 && lst.st_uid != uid)
        return Error{Errc::permission_denied, "'" + next.string() + "' is a symlink of uid " +
                                                  std::to_string(lst.st_uid) + ": refused"};
      if (++links > 40) return open_error(next, ELOOP);
      char target[4096];
      ssize_t n = ::readlinkat(cur.get(), name.c_str(), target, sizeof target - 1);
      if (n <= 0) return errno_error("reading symlink '" + next.string() + "'");
      fs::path t(std::string(target, static_cast<std::size_t>(n)));
      if (t.is_absolute()) {
        cur = UniqueFd(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
        if (!cur) return errno_error("opening /");
        *at = "/";
      }
      push_front(todo, t);
      continue;
    }
    const int flags =
        (todo.empty() && readable ? O_RDONLY : O_PATH) | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    UniqueFd fd(::openat(cur.get(), name.c_str(), flags));
    if (!fd) return open_error(next, errno);
    cur = std::move(fd);
    *at = next;
  }
  return cur;
}

}  // namespace

Result<UniqueFd> open_private_dir(const fs::path& path, bool create) {
  const uid_t uid = geteuid();
  fs::path at;
  GCR_TRY_ASSIGN(UniqueFd dir, walk(path, create, true, uid, &at));
  struct stat st {};
  if (::fstat(dir.get(), &st) != 0) return errno_error("fstat '" + at.string() + "'");
  GCR_TRY(check_own(st, at, uid));
  if ((st.st_mode & 077) && ::fchmod(dir.get(), 0700) != 0)
    return errno_error("making '" + at.string() + "' 0700");
  return dir;
}

Status check_trusted_parent(const fs::path& path, uid_t uid) {
  fs::path at;
  std::error_code ec;
  fs::path abs = fs::absolute(path, ec);
  GCR_TRY_ASSIGN(UniqueFd dir, walk((ec ? path : abs).parent_path(), false, false, uid, &at));
  struct stat st {};
  if (::fstat(dir.get(), &st) != 0) return errno_error("fstat '" + at.string() + "'");
  GCR_TRY(check_ancestor(st, at, uid));
  if (st.st_mode & 022)  // sticky or not: another user could take the socket's name
    return Error{Errc::permission_denied, "the directory of gcrd's socket, '" + at.string() +
                                              "' (mode " + mode_text(st.st_mode) +
                                              "), is writable by other users: not trusted"};
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
