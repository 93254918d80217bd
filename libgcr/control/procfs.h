// What a caller learns about a process from /proc: whether it is alive, and where its gcr-control
// mailbox is (docs/protocol.md §2). Reading /proc/<pid>/fd takes ptrace-level access, which is
// exactly the right that controlling a process requires: this file turns its refusals into the
// errors users see.
#pragma once

#include <sys/types.h>

#include <string>

#include "gcr/result.h"

namespace gcr::control {

enum class ProcessLife { alive, stopped, exited, absent };

// From /proc/<pid>/stat: stopped (T, t: SIGSTOP, a debugger), exited (a zombie), absent.
ProcessLife process_life(pid_t pid);

// "permission denied: only root or the process owner may control pid N"
Error permission_error(pid_t pid);

}  // namespace gcr::control
