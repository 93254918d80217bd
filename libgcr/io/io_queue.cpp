// Picks the IoQueue backend, and the iovec bookkeeping both backends share.
#include <cstring>

#include "gcr/settings.h"
#include "io/io_queue.h"

namespace gcr::io {
namespace {

// GCR_NO_URING=1 forces the blocking backend, so that tests exercise both (gcr/settings.h).
bool uring_forbidden_by_env() {
  return settings().test_hooks.no_uring;
}

}  // namespace

std::unique_ptr<IoQueue> make_io_queue(unsigned depth, bool use_io_uring) {
  if (use_io_uring && !uring_forbidden_by_env()) {
    auto q = make_uring_queue(depth);
    if (q) return std::move(q).value();
  }
  return make_blocking_queue();
}

bool advance_iov(std::vector<iovec>& iov, std::size_t& first, std::size_t bytes) {
  while (first < iov.size()) {
    iovec& v = iov[first];
    if (bytes < v.iov_len) {
      v.iov_base = static_cast<char*>(v.iov_base) + bytes;
      v.iov_len -= bytes;
      return true;
    }
    bytes -= v.iov_len;
    ++first;
    if (bytes == 0) {
      // Skip empty entries so that `first` names one with bytes left.
      while (first < iov.size() && iov[first].iov_len == 0) ++first;
      return first < iov.size();
    }
  }
  return false;
}

}  // namespace gcr::io
