// gc.lock: see gc_lock.h.
#include "store/gc_lock.h"

#include <fcntl.h>
#include <sys/file.h>

#include <cerrno>

#include "gcr/file.h"

namespace gcr::store {

Result<GcLock> GcLock::take(const std::filesystem::path& path, int op) {
  // Created on first use. A read-only store (another user's, a read-only mount) can still be
  // read: flock needs only an open descriptor. Never through a link (O_NOFOLLOW): in a store
  // another user can write, a gc.lock made a link would have root create or open a file of that
  // user's choosing.
  int raw = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (raw < 0 && errno != ELOOP && op != LOCK_EX)
    raw = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (raw < 0 && errno == ELOOP)
    return Error{Errc::permission_denied,
                 path.string() +
                     " is a symbolic link; a store's gc.lock must be a plain file "
                     "(someone who can write the store replaced it: remove it)"};
  if (raw < 0) return io::file_error("cannot open", path, errno);
  Result<UniqueFd> fd = UniqueFd(raw);
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
