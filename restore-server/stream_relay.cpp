#include "stream_relay.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

namespace gcr::gcrd {

bool reopens_as_itself(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return false;
  return S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode);
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
      if (errno != EINVAL) return;  // the reader went away: nothing left to copy into
      // splice does not go into this kind of file: copy through a buffer instead.
      for (;;) {
        ssize_t r = read(in.get(), buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return;
        for (ssize_t done = 0; done < r;) {
          ssize_t w = write(out.get(), buf + done, static_cast<std::size_t>(r - done));
          if (w < 0 && errno == EINTR) continue;
          if (w <= 0) return;
          done += w;
        }
      }
    }
  }).detach();
  return write_end;
}

}  // namespace gcr::gcrd
