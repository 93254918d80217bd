// Directories only this process's user can write: where gcrd keeps its work directories, its
// socket and its log, and where CRIU reads what it executes (docs/security.md, "Private state").
//
// Note [Private directories]
// A directory is private when it is owned by the effective uid, is not writable by group or
// others, and every directory above it is owned by root or that uid and is either not writable
// by others or sticky (/tmp, /var/tmp: nobody else can rename or remove an entry there that is
// not theirs). Then nothing in it can be created, swapped or replaced by another user, and paths
// under it may be used by name (CRIU's -D, a socket's bind). A pre-existing directory that fails
// the check is refused, never "fixed": another user may already have put something in it.
// Components are opened one by one with O_NOFOLLOW, so a symlink planted in the path is an error.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>

#include "gcr/result.h"
#include "gcr/unique_fd.h"

namespace gcr::io {

// Opens directory `path` (made absolute) as O_DIRECTORY|O_NOFOLLOW after checking that it is
// private (Note [Private directories]); with `create`, missing components are made 0700. A
// private directory with read or execute bits for others is narrowed to 0700.
// Errors: permission_denied (owned by another user, writable by others, a symlink), not_found,
// io_error; each names the directory at fault and what to do.
Result<UniqueFd> open_private_dir(const std::filesystem::path& path, bool create);

// Checks that the directory holding `path` (a socket, say) is safe to trust, without creating
// anything: owned by root or `uid`, not writable by others, and reached through directories that
// are (or sticky). For a client deciding whether a gcrd socket is its own user's or root's.
Status check_trusted_parent(const std::filesystem::path& path, uid_t uid);

// openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC, 0600) for a regular file that must belong
// to this process's euid (a log, a pid file): a symlink or another user's file is refused.
Result<UniqueFd> open_private_file(int dir, const std::string& name, int flags);

}  // namespace gcr::io
