// What gcrd reads of a process from /proc.
#pragma once

#include <sys/types.h>

#include <string>

namespace gcr::gcrd {

// The uid that owns pid (its /proc entry), or (uid_t)-1 if it is gone.
uid_t process_owner(pid_t pid);

// The command line of pid, NUL-separated as in /proc; empty if unreadable.
std::string process_cmdline(pid_t pid);

// Whether process `pid` is gone (or a zombie), runs on untraced, or is still traced (CRIU's).
enum class TraceState { gone, running, traced };
TraceState trace_state(pid_t pid);

}  // namespace gcr::gcrd
