// io_uring backend of IoQueue: up to `depth` reads and writes in flight, each a readv/writev at an
// offset, continued after a short transfer. Requests are submitted as they are queued, so the
// kernel works on them while the caller hashes or compresses the next batch.
#include <liburing.h>

#include <cerrno>
#include <vector>

#include "io/io_queue.h"

namespace gcr::io {
namespace {

class UringQueue final : public IoQueue {
 public:
  UringQueue() = default;
  ~UringQueue() override {
    if (!ready_) return;
    // After a hard failure the kernel may still hold requests: closing the ring cancels and
    // waits for them.
    (void)drain();
    io_uring_queue_exit(&ring_);
  }

  Status init(unsigned depth) {
    int rc = io_uring_queue_init(depth, &ring_, 0);
    if (rc < 0) return errno_error("io_uring_queue_init", -rc);
    ready_ = true;
    slots_.resize(depth);
    for (unsigned i = depth; i > 0; --i) free_.push_back(i - 1);
    return ok();
  }

  const char* kind() const override { return "io_uring"; }

  Status read(int fd, std::uint64_t offset, std::vector<iovec> iov, Done done) override {
    return queue(false, fd, offset, std::move(iov), std::move(done));
  }
  Status write(int fd, std::uint64_t offset, std::vector<iovec> iov, Done done) override {
    return queue(true, fd, offset, std::move(iov), std::move(done));
  }

  Status wait_one() override {
    GCR_TRY(broken_);
    if (in_flight_ == 0) return ok();
    io_uring_cqe* cqe = nullptr;
    for (;;) {
      int rc = io_uring_wait_cqe(&ring_, &cqe);
      if (rc == -EINTR) continue;
      if (rc < 0) return errno_error("io_uring_wait_cqe", -rc);
      break;
    }
    // Reap everything that is ready, not just the first, to keep the ring moving.
    while (cqe != nullptr) {
      auto index = static_cast<unsigned>(io_uring_cqe_get_data64(cqe));
      int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      GCR_TRY(complete(index, res));
      cqe = nullptr;
      if (io_uring_peek_cqe(&ring_, &cqe) != 0) break;
    }
    return ok();
  }

  Status drain() override {
    while (in_flight_ > 0) GCR_TRY(wait_one());
    GCR_TRY(broken_);
    return ok();
  }

  unsigned in_flight() const override { return in_flight_; }

 private:
  struct Slot {
    bool write = false;
    int fd = -1;
    std::uint64_t offset = 0;
    std::vector<iovec> iov;
    std::size_t first = 0;  // iov[first] is the next to move (after short transfers)
    Done done;
  };

  Status queue(bool write, int fd, std::uint64_t offset, std::vector<iovec> iov, Done done) {
    GCR_TRY(broken_);
    while (free_.empty()) GCR_TRY(wait_one());
    unsigned index = free_.back();
    free_.pop_back();
    Slot& s = slots_[index];
    s.write = write;
    s.fd = fd;
    s.offset = offset;
    s.iov = std::move(iov);
    s.first = 0;
    s.done = std::move(done);
    ++in_flight_;
    // An empty request completes at once.
    if (!advance_iov(s.iov, s.first, 0)) return finish(index, 0);
    return submit(index);
  }

  Status submit(unsigned index) {
    GCR_TRY(broken_);
    Slot& s = slots_[index];
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {
      // The submission ring is full of prepared entries: hand them to the kernel and retry.
      GCR_TRY(flush());
      sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) return fail(make_error(Errc::internal, "io_uring: no free entry"));
    }
    auto count = static_cast<unsigned>(s.iov.size() - s.first);
    if (s.write) {
      io_uring_prep_writev(sqe, s.fd, s.iov.data() + s.first, count, s.offset);
    } else {
      io_uring_prep_readv(sqe, s.fd, s.iov.data() + s.first, count, s.offset);
    }
    io_uring_sqe_set_data64(sqe, index);
    return flush();
  }

  // Hands prepared entries to the kernel. A prepared entry that the kernel refuses stays in the
  // ring and would complete into a reused slot, so a hard failure breaks the queue for good.
  Status flush() {
    for (;;) {
      int rc = io_uring_submit(&ring_);
      if (rc >= 0) return ok();
      if (rc == -EINTR) continue;
      // EBUSY (completion ring overflow) cannot happen: at most `depth` requests are in flight
      // and the completion ring holds twice that.
      return fail(errno_error("io_uring_submit", -rc));
    }
  }

  Error fail(Error e) {
    broken_ = e;
    return e;
  }

  Status complete(unsigned index, int res) {
    Slot& s = slots_[index];
    if (res == -EINTR || res == -EAGAIN) return submit(index);
    if (res < 0) return finish(index, -res);
    if (res == 0) return finish(index, EIO);  // end of file on a read; a write that moved nothing
    s.offset += static_cast<std::uint64_t>(res);
    if (advance_iov(s.iov, s.first, static_cast<std::size_t>(res))) return submit(index);
    return finish(index, 0);
  }

  Status finish(unsigned index, int err) {
    Slot& s = slots_[index];
    Done done = std::move(s.done);
    s.iov.clear();
    s.done = nullptr;
    free_.push_back(index);
    --in_flight_;
    if (done) done(err);
    return ok();
  }

  io_uring ring_{};
  bool ready_ = false;
  std::vector<Slot> slots_;
  std::vector<unsigned> free_;
  unsigned in_flight_ = 0;
  Status broken_;
};

}  // namespace

Result<std::unique_ptr<IoQueue>> make_uring_queue(unsigned depth) {
  auto q = std::make_unique<UringQueue>();
  GCR_TRY(q->init(depth == 0 ? 1 : depth));
  return std::unique_ptr<IoQueue>(std::move(q));
}

}  // namespace gcr::io
