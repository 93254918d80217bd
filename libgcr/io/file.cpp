// Small-file helpers: see file.h.
#include "gcr/file.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace gcr::io {

Error file_error(const std::string& what, const std::filesystem::path& path, int err) {
  Error e = errno_error(what + " '" + path.string() + "'", err);
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      e.code = Errc::no_space;
      e.message +=
          "; the store's filesystem is full: free space there or run 'gcr gc' to drop "
          "unreferenced data, then retry";
      break;
    case EACCES:
    case EPERM:
    case EROFS:
      e.code = Errc::permission_denied;
      e.message += "; check the owner and mode of the store directory (uid " +
                   std::to_string(::geteuid()) +
                   " must be able to write it), or pick another store with GCR_STORE";
      break;
    default:
      break;
  }
  return e;
}

Result<UniqueFd> open_file(const std::filesystem::path& path, int flags, mode_t mode) {
  for (;;) {
    int fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
    if (fd >= 0) return UniqueFd(fd);
    if (errno == EINTR) continue;
    return file_error((flags & O_CREAT) ? "cannot create" : "cannot open", path, errno);
  }
}

Result<std::vector<std::byte>> read_file(const std::filesystem::path& path,
                                         std::uint64_t max_bytes) {
  GCR_TRY_ASSIGN(UniqueFd fd, open_file(path, O_RDONLY));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return file_error("cannot stat", path, errno);
  if (!S_ISREG(st.st_mode)) {
    return make_error(Errc::corrupt_image, "'" + path.string() + "' is not a regular file");
  }
  auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > max_bytes) {
    return make_error(Errc::corrupt_image, "'" + path.string() + "' is " + std::to_string(size) +
                                               " bytes, more than the limit of " +
                                               std::to_string(max_bytes));
  }
  std::vector<std::byte> data(size);
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::pread(fd.get(), data.data() + done, data.size() - done, static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return file_error("cannot read", path, errno);
    }
    if (n == 0) break;  // shrank under us: return what is there, the decoder judges it
    done += static_cast<std::size_t>(n);
  }
  data.resize(done);
  return data;
}

Status write_all(int fd, std::span<const std::byte> data, std::uint64_t offset,
                 const std::filesystem::path& path) {
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n =
        ::pwrite(fd, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return file_error("cannot write", path, errno);
    }
    if (n == 0) return file_error("cannot write", path, EIO);
    done += static_cast<std::size_t>(n);
  }
  return ok();
}

Status sync_fd(int fd, const std::filesystem::path& path) {
  if (::fsync(fd) != 0) return file_error("cannot fsync", path, errno);
  return ok();
}

Status sync_dir(const std::filesystem::path& dir) {
  GCR_TRY_ASSIGN(UniqueFd fd, open_file(dir, O_RDONLY | O_DIRECTORY));
  return sync_fd(fd.get(), dir);
}

Status write_file_durably(const std::filesystem::path& tmp, const std::filesystem::path& final,
                          std::span<const std::byte> bytes) {
  GCR_TRY_ASSIGN(UniqueFd fd, open_file(tmp, O_WRONLY | O_CREAT | O_EXCL, 0600));
  Status s = write_all(fd.get(), bytes, 0, tmp);
  if (s) s = sync_fd(fd.get(), tmp);
  if (s) s = rename_file(tmp, final);
  if (!s) (void)::unlink(tmp.c_str());
  return s;
}

Status replace_file(const std::filesystem::path& path, std::span<const std::byte> bytes,
                    mode_t mode) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
  const std::string base = path.filename().string();
  if (base.empty() || base == "." || base == "..")
    return Error{Errc::invalid_argument, "'" + path.string() + "' names no file"};
  UniqueFd dirfd(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dirfd) return file_error("cannot open the directory of", path, errno);
  std::string tmp;
  UniqueFd fd;
  for (int attempt = 0; attempt < 16 && !fd; ++attempt) {
    std::uint64_t r = 0;
    if (::getrandom(&r, sizeof r, 0) != static_cast<ssize_t>(sizeof r))
      return errno_error("getrandom");
    char suffix[24];
    std::snprintf(suffix, sizeof suffix, ".%016llx", static_cast<unsigned long long>(r));
    tmp = "." + base + suffix;
    fd.reset(::openat(dirfd.get(), tmp.c_str(),
                      O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
    if (!fd && errno != EEXIST) return file_error("cannot create a file beside", path, errno);
  }
  if (!fd) return Error{Errc::io_error, "no fresh name for a file beside " + path.string()};
  Status s = write_all(fd.get(), bytes, 0, path);
  if (s && ::fchmod(fd.get(), mode) != 0) s = file_error("cannot set the mode of", path, errno);
  if (s && ::renameat(dirfd.get(), tmp.c_str(), dirfd.get(), base.c_str()) != 0)
    s = file_error("cannot put in place", path, errno);
  if (!s) (void)::unlinkat(dirfd.get(), tmp.c_str(), 0);
  return s;
}

Status rename_file(const std::filesystem::path& from, const std::filesystem::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return file_error("cannot rename '" + from.string() + "' to", to, errno);
  }
  return ok();
}

Status remove_file(const std::filesystem::path& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return file_error("cannot remove", path, errno);
  }
  return ok();
}

Status make_dir(const std::filesystem::path& path) {
  if (::mkdir(path.c_str(), 0700) != 0) {
    int err = errno;
    struct stat st {};
    if (err == EEXIST && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return ok();
    return file_error("cannot create directory", path, err);
  }
  return ok();
}

}  // namespace gcr::io
