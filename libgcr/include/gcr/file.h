// Small-file helpers for the store: open, read whole, write durably (tmp + fsync + rename), fsync a
// directory, and errors that name the path and say what to do. Bulk data goes through IoQueue.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "gcr/result.h"
#include "gcr/unique_fd.h"

namespace gcr::io {

// An Error for a failed file operation: "<what> '<path>': <strerror>", plus the next step for a
// full disk (no_space) or a permission problem (permission_denied, also for EROFS).
Error file_error(const std::string& what, const std::filesystem::path& path, int err);

// open(2) with O_CLOEXEC added; files are created 0600.
Result<UniqueFd> open_file(const std::filesystem::path& path, int flags, mode_t mode = 0600);

// The whole file, refusing one larger than max_bytes (untrusted input stays bounded).
Result<std::vector<std::byte>> read_file(const std::filesystem::path& path,
                                         std::uint64_t max_bytes);

Status write_all(int fd, std::span<const std::byte> data, std::uint64_t offset,
                 const std::filesystem::path& path);
Status sync_fd(int fd, const std::filesystem::path& path);
Status sync_dir(const std::filesystem::path& dir);

// Writes bytes to `tmp` (0600, must not exist), fsyncs it and renames it to `final`. The caller
// fsyncs final's directory when the rename must survive a crash. On failure tmp is removed.
Status write_file_durably(const std::filesystem::path& tmp, const std::filesystem::path& final,
                          std::span<const std::byte> bytes);

// Puts `bytes` at `path` whole (a reader never sees half a file), following no link an other user
// may have planted: the file is written under a fresh random name in path's directory
// (O_CREAT | O_EXCL | O_NOFOLLOW, `mode`), then renamed over path, which replaces a link there
// instead of writing through it. For files root writes where the caller asked (gcr --trace
// FILE, gcr trace -o), whose directory another user may be able to write.
Status replace_file(const std::filesystem::path& path, std::span<const std::byte> bytes,
                    mode_t mode = 0600);

Status rename_file(const std::filesystem::path& from, const std::filesystem::path& to);
// unlink(2); a missing file is not an error.
Status remove_file(const std::filesystem::path& path);

// mkdir(2) with 0700; an existing directory is not an error.
Status make_dir(const std::filesystem::path& path);

}  // namespace gcr::io
