// Blocking backend of IoQueue: each request is a preadv/pwritev loop that finishes before read()
// or write() returns. The fallback where io_uring is unavailable (seccomp, some containers) or
// switched off (StoreOptions::use_io_uring, GCR_NO_URING=1).
#include <sys/uio.h>

#include <cerrno>

#include "io/io_queue.h"

namespace gcr::io {
namespace {

int transfer(bool write, int fd, std::uint64_t offset, std::vector<iovec>& iov) {
  std::size_t first = 0;
  if (!advance_iov(iov, first, 0)) return 0;
  for (;;) {
    auto count = static_cast<int>(iov.size() - first);
    ssize_t n = write ? ::pwritev(fd, iov.data() + first, count, static_cast<off_t>(offset))
                      : ::preadv(fd, iov.data() + first, count, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return errno;
    }
    if (n == 0) return EIO;  // end of file on a read; a write that moved nothing
    offset += static_cast<std::uint64_t>(n);
    if (!advance_iov(iov, first, static_cast<std::size_t>(n))) return 0;
  }
}

class BlockingQueue final : public IoQueue {
 public:
  const char* kind() const override { return "blocking"; }
  Status read(int fd, std::uint64_t offset, std::vector<iovec> iov, Done done) override {
    int err = transfer(false, fd, offset, iov);
    if (done) done(err);
    return ok();
  }
  Status write(int fd, std::uint64_t offset, std::vector<iovec> iov, Done done) override {
    int err = transfer(true, fd, offset, iov);
    if (done) done(err);
    return ok();
  }
  Status wait_one() override { return ok(); }
  Status drain() override { return ok(); }
  unsigned in_flight() const override { return 0; }
};

}  // namespace

std::unique_ptr<IoQueue> make_blocking_queue() {
  return std::make_unique<BlockingQueue>();
}

}  // namespace gcr::io
