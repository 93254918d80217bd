// images_archive.h: a runtime's images directory over a gcrd-net connection.
#include "images_archive.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <string>
#include <vector>

#include "gcr/unique_fd.h"
#include "gcrd_protocol.h"

namespace gcr::gcrd {
namespace {

constexpr std::size_t kBuffer = 1 << 20;
constexpr std::uint64_t kMaxFiles = 100000;

Status send_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno_error("sending the images to the network");
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return ok();
}

Status recv_exact(int fd, char* p, std::size_t n) {
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return Error{Errc::unreachable, "the images ended early: the peer went away"};
    if (r < 0) return errno_error("reading the images from the network");
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return ok();
}

// One line, a byte at a time: what follows it is the file's bytes, read exactly.
Result<std::string> recv_line(int fd) {
  std::string line;
  for (char c;;) {
    GCR_TRY(recv_exact(fd, &c, 1));
    if (c == '\n') return line;
    if (line.size() >= 4096) return Error{Errc::protocol, "an images header longer than 4 KiB"};
    line += c;
  }
}

bool plain_name(const std::string& name) {
  return !name.empty() && name.size() <= 255 && name != "." && name != ".." &&
         name.find('/') == std::string::npos && name.find('\0') == std::string::npos;
}

std::uint64_t to_u64(const std::map<std::string, std::string>& f, const char* key, bool* good) {
  auto it = f.find(key);
  if (it == f.end() || it->second.empty() ||
      it->second.find_first_not_of("0123456789") != std::string::npos || it->second.size() > 19) {
    *good = false;
    return 0;
  }
  return std::stoull(it->second);
}

}  // namespace

Result<ImagesSent> send_images(int fd, const std::filesystem::path& dir) {
  std::error_code ec;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.is_regular_file(ec) && !e.is_symlink(ec)) files.push_back(e.path());
  if (ec)
    return Error{Errc::io_error,
                 "reading the images directory " + dir.string() + ": " + ec.message()};
  std::sort(files.begin(), files.end());
  ImagesSent sent;
  std::vector<char> buf(kBuffer);
  for (const auto& path : files) {
    UniqueFd in(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    struct stat st {};
    if (!in || ::fstat(in.get(), &st) != 0) return errno_error("opening " + path.string());
    const auto size = static_cast<std::uint64_t>(st.st_size);
    std::string head =
        "file " +
        encode_fields({{"name", path.filename().string()}, {"size", std::to_string(size)}}) + "\n";
    GCR_TRY(send_all(fd, head.data(), head.size()));
    for (std::uint64_t left = size; left > 0;) {
      ssize_t r = ::read(in.get(), buf.data(), std::min<std::uint64_t>(left, buf.size()));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return Error{Errc::io_error, path.string() + " changed while it was sent"};
      GCR_TRY(send_all(fd, buf.data(), static_cast<std::size_t>(r)));
      left -= static_cast<std::uint64_t>(r);
    }
    ++sent.files;
    sent.bytes += size;
  }
  std::string end = "end " +
                    encode_fields({{"files", std::to_string(sent.files)},
                                   {"bytes", std::to_string(sent.bytes)}}) +
                    "\n";
  GCR_TRY(send_all(fd, end.data(), end.size()));
  return sent;
}

Result<ImagesSent> receive_images(int fd, int dir_fd, std::uint64_t limit) {
  ImagesSent got;
  std::vector<char> buf(kBuffer);
  for (;;) {
    GCR_TRY_ASSIGN(std::string line, recv_line(fd));
    auto sp = line.find(' ');
    const std::string kind = line.substr(0, sp);
    auto f = decode_fields(sp == std::string::npos ? "" : line.substr(sp + 1));
    bool good = true;
    if (kind == "end") {
      std::uint64_t files = to_u64(f, "files", &good), bytes = to_u64(f, "bytes", &good);
      if (!good || files != got.files || bytes != got.bytes)
        return Error{Errc::protocol, "the images' end line does not match what came: " + line};
      return got;
    }
    if (kind != "file")
      return Error{Errc::protocol, "an images header '" + line.substr(0, 80) + "'"};
    const std::string name = f.count("name") ? f.at("name") : "";
    const std::uint64_t size = to_u64(f, "size", &good);
    if (!good || !plain_name(name))
      return Error{Errc::protocol,
                   "an images file header that names no plain file: " + line.substr(0, 200)};
    if (++got.files > kMaxFiles || size > limit - std::min(limit, got.bytes))
      return Error{Errc::no_space, "the images exceed " + std::to_string(limit >> 20) + " MiB or " +
                                       std::to_string(kMaxFiles) + " files"};
    UniqueFd out;
    if (dir_fd >= 0) {
      out.reset(::openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                         0600));
      if (!out) return errno_error("creating the image file " + name);
    }
    for (std::uint64_t left = size; left > 0;) {
      std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(left, buf.size()));
      GCR_TRY(recv_exact(fd, buf.data(), take));
      for (std::size_t done = 0; out && done < take;) {
        ssize_t w = ::write(out.get(), buf.data() + done, take - done);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return errno_error("writing the image file " + name);
        done += static_cast<std::size_t>(w);
      }
      left -= take;
    }
    got.bytes += size;
  }
}

}  // namespace gcr::gcrd
