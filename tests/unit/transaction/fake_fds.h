// Descriptors for the fake worlds of the transaction tests: device memory as memfds.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "gcr/unique_fd.h"

namespace gcr::gcrd::test {

// A memfd holding `bytes` (invalid when it could not be made).
inline UniqueFd memfd_with(std::span<const std::byte> bytes) {
  UniqueFd fd(::memfd_create("fake-device", MFD_CLOEXEC));
  if (fd && ::pwrite(fd.get(), bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size()))
    fd.reset();
  return fd;
}

inline UniqueFd dup_fd(int fd) {
  return UniqueFd(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
}

inline std::uint64_t inode_of(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 ? st.st_ino : 0;
}

// The first `size` bytes of fd; empty when there are fewer.
inline std::vector<std::byte> bytes_of(int fd, std::size_t size) {
  std::vector<std::byte> out(size);
  if (::pread(fd, out.data(), size, 0) != static_cast<ssize_t>(size)) out.clear();
  return out;
}

}  // namespace gcr::gcrd::test
