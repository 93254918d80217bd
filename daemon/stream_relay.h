// Copying a restored process's output into a file CRIU cannot hand it directly (Note [Streams
// reconnected by rule] in docs/processes.md): CRIU restores an inherited pipe by reopening it
// through /proc/self/fd, which for a regular file starts writing at offset 0 without O_APPEND,
// and for a socket fails. Such a target gets a pipe whose reading end gcrd copies into it.
#pragma once

#include "gcr/result.h"
#include "gcr/unique_fd.h"

namespace gcr::gcrd {

// Whether CRIU may be handed fd for a pipe: an anonymous pipe, which reopening through
// /proc/self/fd gives back as itself. Anything else gets a relay: a regular file (its offset and
// O_APPEND would be lost), a socket (cannot be reopened), and a FIFO or a device, which CRIU,
// as root, would reopen with the image's access mode rather than the one the client had.
bool may_reopen_as_pipe(int fd);

// A pipe whose writing end is returned; a detached thread copies what arrives on it into a
// duplicate of `target` until every writer has closed it.
Result<UniqueFd> relay_into(int target);

}  // namespace gcr::gcrd
