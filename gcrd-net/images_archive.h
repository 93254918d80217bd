// A container runtime's images directory (CRIU's images and gcr's reference to the checkpoint of
// the device memory) sent over a gcrd-net request connection, after the request line of
// `restore_container` (docs/protocol.md §14):
//
//   "file name=<encoded> size=<bytes>\n" <bytes>     one per regular file of the directory
//   "end files=<count> bytes=<total>\n"
//
// CRIU's images are flat: subdirectories, links and special files are not sent (a runtime's
// images directory holds none). The receiver takes names that are one path component only, and
// writes into a directory it made (Note [Network trust] in net_store.h: nothing a peer sends names
// a path on this host).
#pragma once

#include <cstdint>
#include <filesystem>

#include "gcr/result.h"

namespace gcr::gcrd {

struct ImagesSent {
  std::uint64_t files = 0, bytes = 0;
};

// Sends every regular file of `dir` on `fd`.
Result<ImagesSent> send_images(int fd, const std::filesystem::path& dir);

// Reads what send_images() sent into the directory `dir_fd` (files created 0600, none may exist
// yet), at most `limit` bytes in all. Reads nothing past the "end" line. dir_fd < 0: read and
// dropped (a refused request's, so that the peer still reads why).
Result<ImagesSent> receive_images(int fd, int dir_fd, std::uint64_t limit);

}  // namespace gcr::gcrd
