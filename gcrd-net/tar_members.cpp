// tar_members.h: plain ustar, read and rewritten by 512-byte blocks.
#include "tar_members.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>

namespace gcr::gcrd {
namespace {

constexpr std::uint64_t kBlock = 512;
using Block = std::array<char, kBlock>;

Status read_exact(int fd, char* p, std::size_t n, std::uint64_t offset) {
  while (n > 0) {
    ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return errno_error("reading the archive");
    if (got == 0) return Error{Errc::corrupt_image, "the archive ends inside a member"};
    p += got, n -= static_cast<std::size_t>(got), offset += static_cast<std::uint64_t>(got);
  }
  return ok();
}

Status write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    ssize_t put = ::write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) return errno_error("writing the archive");
    p += put, n -= static_cast<std::size_t>(put);
  }
  return ok();
}

// An octal field (NUL- or space-terminated); -1 for anything else.
std::int64_t octal(const char* f, std::size_t len) {
  std::int64_t v = 0;
  std::size_t k = 0;
  while (k < len && f[k] == ' ') ++k;
  bool any = false;
  for (; k < len && f[k] >= '0' && f[k] <= '7'; ++k, any = true) {
    if (v > (std::int64_t{1} << 58)) return -1;
    v = v * 8 + (f[k] - '0');
  }
  for (; k < len; ++k)
    if (f[k] != '\0' && f[k] != ' ') return -1;
  return any ? v : -1;
}

unsigned checksum_of(const Block& b) {
  unsigned sum = 0;
  for (std::size_t k = 0; k < kBlock; ++k)
    sum += (k >= 148 && k < 156) ? ' ' : static_cast<unsigned char>(b[k]);
  return sum;
}

std::string field_text(const char* f, std::size_t len) {
  return std::string(f, strnlen(f, len));
}

std::uint64_t padded(std::uint64_t size) {
  return (size + kBlock - 1) / kBlock * kBlock;
}

Result<TarMember> parse_header(const Block& b, std::uint64_t offset) {
  auto bad = [&](const std::string& what) {
    return Error{Errc::corrupt_image,
                 "archive offset " + std::to_string(offset) + ": " + what +
                     " (gcr takes plain ustar archives, as podman 4 exports them)"};
  };
  if (octal(&b[148], 8) != static_cast<std::int64_t>(checksum_of(b)))
    return bad("a header whose checksum does not match");
  const std::int64_t size = octal(&b[124], 12);
  if (size < 0) return bad("a header with no size");
  const char type = b[156];
  TarMember m;
  m.name = field_text(&b[0], 100);
  if (std::memcmp(&b[257], "ustar", 5) == 0 && b[345] != '\0')
    m.name = field_text(&b[345], 155) + "/" + m.name;
  if (type == '5') {
    m.directory = true;
  } else if (type != '0' && type != '\0') {
    return bad("member '" + m.name + "' of type '" + std::string(1, type) +
               "' (links, devices, pax and long-name headers are refused)");
  }
  if (m.name.empty() || m.name.find('\0') != std::string::npos) return bad("a nameless member");
  m.header_offset = offset;
  m.data_offset = offset + kBlock;
  m.size = static_cast<std::uint64_t>(size);
  return m;
}

}  // namespace

Result<std::vector<TarMember>> list_tar_members(int fd) {
  std::vector<TarMember> out;
  for (std::uint64_t offset = 0;;) {
    Block b{};
    GCR_TRY(read_exact(fd, b.data(), kBlock, offset));
    if (std::all_of(b.begin(), b.end(), [](char c) { return c == '\0'; })) return out;
    GCR_TRY_ASSIGN(TarMember m, parse_header(b, offset));
    offset = m.data_offset + padded(m.size);
    out.push_back(std::move(m));
    if (out.size() > 100000) return Error{Errc::corrupt_image, "an archive of 100000 members"};
  }
}

Result<std::string> read_tar_member(int fd, const TarMember& m, std::uint64_t limit) {
  if (m.size > limit)
    return Error{Errc::corrupt_image, "archive member '" + m.name + "' is " +
                                          std::to_string(m.size) + " bytes, more than " +
                                          std::to_string(limit) + " expected"};
  std::string data(m.size, '\0');
  GCR_TRY(read_exact(fd, data.data(), data.size(), m.data_offset));
  return data;
}

Status copy_tar_replacing(int in_fd, int out_fd, const std::string& name, const std::string& data) {
  GCR_TRY_ASSIGN(std::vector<TarMember> members, list_tar_members(in_fd));
  bool replaced = false;
  std::vector<char> buf;
  for (const TarMember& m : members) {
    Block h{};
    GCR_TRY(read_exact(in_fd, h.data(), kBlock, m.header_offset));
    if (!m.directory && m.name == name && !replaced) {
      replaced = true;
      std::snprintf(&h[124], 12, "%011llo", static_cast<unsigned long long>(data.size()));
      std::snprintf(&h[148], 8, "%06o", checksum_of(h));
      h[155] = ' ';
      GCR_TRY(write_all(out_fd, h.data(), kBlock));
      std::string body = data;
      body.resize(padded(data.size()), '\0');
      GCR_TRY(write_all(out_fd, body.data(), body.size()));
      continue;
    }
    // The member as it is, header and data, a MiB at a time (a root file system's diff is large).
    const std::uint64_t end = m.data_offset + padded(m.size);
    for (std::uint64_t at = m.header_offset; at < end;) {
      buf.resize(std::min<std::uint64_t>(end - at, 1 << 20));
      GCR_TRY(read_exact(in_fd, buf.data(), buf.size(), at));
      GCR_TRY(write_all(out_fd, buf.data(), buf.size()));
      at += buf.size();
    }
  }
  if (!replaced) return Error{Errc::not_found, "the archive has no member '" + name + "'"};
  const std::vector<char> end(2 * kBlock, '\0');
  return write_all(out_fd, end.data(), end.size());
}

}  // namespace gcr::gcrd
