// gc.lock: see gc_lock.h.
#include "store/gc_lock.h"

#include <fcntl.h>
#include <sys/file.h>

#include <cerrno>

#include "io/file.h"

namespace gcr::store {

Result<GcLock> GcLock::take(const std::filesystem::path& path, int op) {
  // Created on first use. A read-only store (another user's, a read-only mount) can still be
  // read: flock needs only an open descriptor.
  auto fd = io::open_file(path, O_RDWR | O_CREAT, 0600);
  if (!fd) {
    auto ro = io::open_file(path, O_RDONLY);
    if (!ro || op == LOCK_EX) return std::move(fd).error();
    fd = std::move(ro);
  }
  while (::flock(fd->get(), op) != 0) {
    if (errno == EINTR) continue;
    return io::file_error("cannot lock", path, errno);
  }
  GcLock lock;
  lock.fd_ = std::move(fd).value();
  return lock;
}

Result<GcLock> GcLock::shared(const std::filesystem::path& path) {
  return take(path, LOCK_SH);
}
Result<GcLock> GcLock::exclusive(const std::filesystem::path& path) {
  return take(path, LOCK_EX);
}

}  // namespace gcr::store
