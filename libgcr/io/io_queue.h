// IoQueue: many reads and writes at file offsets in flight at once, and their completions. The
// store's one door to the disk for bulk data (pack records, source files, materialized images):
// io_uring (uring.cpp) when the kernel lets us, else plain preadv/pwritev (blocking.cpp).
// Small metadata files (indexes, manifests, tags) go through gcr/file.h instead.
//
// Not thread-safe: one queue per writer, reader or job, used by one thread at a time.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "gcr/result.h"

namespace gcr::io {

// Runs once per request, on the thread that submits or waits: 0 when every byte moved, else an
// errno (EIO for a read past the end of the file). It must not submit requests of its own.
using Done = std::function<void(int err)>;

class IoQueue {
 public:
  // Waits for requests still in flight: their buffers may be freed only after that.
  virtual ~IoQueue() = default;

  virtual const char* kind() const = 0;  // "io_uring" or "blocking"

  // Queue a transfer of every byte of iov at offset. When queue_depth requests are in flight,
  // waits for one first. Returns an error only when the queue itself fails (io_uring_submit);
  // the request's own outcome goes to done. A short transfer is continued until whole or failed.
  virtual Status read(int fd, std::uint64_t offset, std::vector<iovec> iov, Done done) = 0;
  virtual Status write(int fd, std::uint64_t offset, std::vector<iovec> iov, Done done) = 0;

  // Waits until at least one request completes (returns at once when none is in flight).
  virtual Status wait_one() = 0;
  // Waits until no request is in flight.
  virtual Status drain() = 0;
  virtual unsigned in_flight() const = 0;

  Status read(int fd, std::uint64_t offset, std::span<std::byte> out, Done done) {
    return read(fd, offset, std::vector<iovec>{{out.data(), out.size()}}, std::move(done));
  }
  Status write(int fd, std::uint64_t offset, std::span<const std::byte> in, Done done) {
    return write(fd, offset, std::vector<iovec>{{const_cast<std::byte*>(in.data()), in.size()}},
                 std::move(done));
  }
};

// io_uring with `depth` requests in flight; fails where io_uring_queue_init does (seccomp,
// containers, old kernels, RLIMIT_MEMLOCK).
Result<std::unique_ptr<IoQueue>> make_uring_queue(unsigned depth);
// One request at a time, done before read()/write() return.
std::unique_ptr<IoQueue> make_blocking_queue();
// io_uring unless use_io_uring is false, GCR_NO_URING=1 is set (read once), or it cannot start.
std::unique_ptr<IoQueue> make_io_queue(unsigned depth, bool use_io_uring);

// Drains a queue when it leaves scope, so that an early return never frees a buffer the kernel
// is still reading or writing. Declare it after the buffers it protects.
class DrainGuard {
 public:
  explicit DrainGuard(IoQueue& io) : io_(io) {}
  DrainGuard(const DrainGuard&) = delete;
  DrainGuard& operator=(const DrainGuard&) = delete;
  ~DrainGuard() {
    if (armed_) (void)io_.drain();
  }
  // Every request it guarded has completed: leave the queue alone on exit.
  void dismiss() { armed_ = false; }

 private:
  IoQueue& io_;
  bool armed_ = true;
};

// Advances an iovec list by `bytes` (a short transfer's progress); returns false when exhausted.
bool advance_iov(std::vector<iovec>& iov, std::size_t& first, std::size_t bytes);

}  // namespace gcr::io

namespace gcr::io {

// Waits until `count` drops to zero; count is decremented by the done of requests on io.
inline Status wait_until_zero(IoQueue& io, const std::size_t& count) {
  while (count > 0) {
    if (io.in_flight() == 0) {
      return make_error(Errc::internal,
                        "I/O requests were lost (" + std::to_string(count) + " never completed)");
    }
    GCR_TRY(io.wait_one());
  }
  return ok();
}

}  // namespace gcr::io
