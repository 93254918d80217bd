// The members of a tar archive another host sent (a podman checkpoint export), read without
// extracting anything: gcr looks at a few members before the runtime imports the archive, and
// rewrites one. Only plain ustar is taken (regular files and directories, names in the header
// itself): an archive with pax or GNU long-name headers, links or devices is refused, so that
// what gcr reads is what the runtime will read. podman 4's exports are such archives.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gcr/result.h"

namespace gcr::gcrd {

struct TarMember {
  std::string name;  // as in the header ("checkpoint/core-1.img"; a directory ends with '/')
  bool directory = false;
  std::uint64_t header_offset = 0, data_offset = 0, size = 0;
};

// Every member of the archive open at `fd`, in order. Errc::corrupt_image naming the offset for a
// header that is not plain ustar (bad checksum, a type other than file or directory).
Result<std::vector<TarMember>> list_tar_members(int fd);

// The data of member `m`, at most `limit` bytes (a larger member is refused).
Result<std::string> read_tar_member(int fd, const TarMember& m, std::uint64_t limit);

// Writes to `out_fd` the archive at `in_fd` with the data of the regular file `name` replaced by
// `data` (its header's size and checksum made anew); Errc::not_found if there is no such member.
Status copy_tar_replacing(int in_fd, int out_fd, const std::string& name, const std::string& data);

}  // namespace gcr::gcrd
