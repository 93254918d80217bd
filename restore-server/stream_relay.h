// Copying a restored process's output into a file CRIU cannot hand it directly (Note [Streams
// reconnected by rule] in docs/processes.md): CRIU restores an inherited pipe by reopening it
// through /proc/self/fd, which for a regular file starts writing at offset 0 without O_APPEND,
// and for a socket fails. Such a target gets a pipe whose reading end gcrd copies into it.
#pragma once

#include "gcr/result.h"
#include "gcr/unique_fd.h"

namespace gcr::gcrd {

// Whether reopening fd through /proc/self/fd gives a file that behaves as fd does (a pipe, a
// FIFO, a terminal or another character device).
bool reopens_as_itself(int fd);

// A pipe whose writing end is returned; a detached thread copies what arrives on it into a
// duplicate of `target` until every writer has closed it.
Result<UniqueFd> relay_into(int target);

}  // namespace gcr::gcrd
