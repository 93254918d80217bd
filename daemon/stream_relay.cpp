#include "stream_relay.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

namespace gcr::gcrd {

bool may_reopen_as_pipe(int fd) {
  char link[64], target[64];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = 0;
  return std::strncmp(target, "pipe:[", 6) == 0;
}

Result<UniqueFd> relay_into(int target) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return errno_error("pipe for a restored process's output");
  UniqueFd read_end(p[0]), write_end(p[1]);
  UniqueFd out(fcntl(target, F_DUPFD_CLOEXEC, 0));
  if (!out) return errno_error("duplicating a restored process's output file");
  std::thread([in = std::move(read_end), out = std::move(out)] {
    char buf[65536];
    for (;;) {
      ssize_t n = splice(in.get(), nullptr, out.get(), nullptr, 1 << 20, SPLICE_F_MOVE);
      if (n == 0) return;
      if (n > 0) continue;
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {  // a non-blocking target: wait until it takes more
        pollfd p{out.get(), POLLOUT, 0};
        (void)poll(&p, 1, -1);
        continue;
      }
      if (errno != EINVAL) return;  // the reader went away: nothing left to copy into
      // splice does not go into this kind of file: copy through a buffer instead.
      for (;;) {
        ssize_t r = read(in.get(), buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return;
        for (ssize_t done = 0; done < r;) {
          ssize_t w = write(out.get(), buf + done, static_cast<std::size_t>(r - done));
          if (w < 0 && errno == EINTR) continue;
          if (w < 0 && errno == EAGAIN) {
            pollfd p{out.get(), POLLOUT, 0};
            (void)poll(&p, 1, -1);
            continue;
          }
          if (w <= 0) return;
          done += w;
        }
      }
    }
  }).detach();
  return write_end;
}

}  // namespace gcr::gcrd
