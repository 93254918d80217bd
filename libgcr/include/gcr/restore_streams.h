// Which file each connection of a checkpointed process tree gets on restore (Note [Streams
// reconnected by rule] in docs/processes.md). The rules, as `gcr restore --help` states them:
//
//   - a regular file it had open for writing or appending (a log): the file as it is now,
//     appended to, however it grew or was rotated since (--stdout/--stderr FILE instead);
//   - any other regular file must be as it was (CRIU checks its size): one that changed is named
//     in an error, unless --accept-changed FILE reopens it as it is now at the old position;
//   - a terminal or a pipe on the root process's stdin, stdout or stderr: the restoring caller's
//     own stdin, stdout or stderr (or --stdin/--stdout/--stderr FILE; with --detach, /dev/null
//     for stdin and a log file for the others). Streams that shared one terminal or pipe stay
//     one: they all get what stdout (else stderr, else stdin) gets;
//   - a terminal or pipe elsewhere (another fd, another task) to something outside the tree:
//     /dev/null, with a warning.
//
// The caller opens every file with its own rights and sends them to gcrd, which hands them to
// CRIU (criu --inherit-fd): gcrd never opens a path for a local user. A migration's destination
// gcrd has no caller on its host: it opens the regular and mapped files itself, as the
// checkpoint's owner, by the same rules (`files_only`), and leaves terminals and pipes to CRIU.
//
// Note [Files reopened for the restored process]
// CRIU runs as root and would reopen each regular file the process had open or mapped by its
// path, checking only its size: a path its owner (or anyone who can write a directory on it)
// turned into a link since the checkpoint, say to /etc/shadow of the same size, would give the
// restored process that file. So gcr opens them itself: every regular file the process had open,
// and every file it mapped whose path someone other than root could have changed (a directory on
// it or the file not root's, or writable by others); each with the owner's rights, resolving no
// symbolic link (openat2 RESOLVE_NO_SYMLINKS: a recorded path is the kernel's, resolved, so a link
// on it now was put there since), checked to be a regular file of the recorded size (else
// --accept-changed), and hands it to CRIU (--inherit-fd), which then opens nothing by that path.
// Files under directories only root can change (the system's libraries) are left to CRIU. The
// fds a process had on one file get one open file after the restore, sharing its position (they
// did for logs before).
#pragma once

#include <sys/types.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "gcr/process_tree.h"
#include "gcr/result.h"
#include "gcr/unique_fd.h"

namespace gcr::criu {

struct StreamOptions {
  // Files are opened with the rights of the checkpointed process's owner when the caller is root
  // and the owner is not (META owner_uid/owner_gid): a path the process recorded may have been
  // turned into a symlink to anything since, and root must not open it for the process.
  uid_t owner_uid = 0;
  gid_t owner_gid = 0;
  std::string stdin_file, stdout_file, stderr_file;  // --stdin/--stdout/--stderr
  bool detach = false;
  std::string detach_log;                // --detach: where stdout and stderr go
  std::set<std::string> accept_changed;  // --accept-changed FILE (absolute paths)
  // Only regular and mapped files: no stream is the caller's (a migration's destination gcrd).
  bool files_only = false;
};

struct StreamPlan {
  struct Inherited {
    std::string key;  // CRIU's key of the connection (gcr/process_tree.h)
    UniqueFd fd;
    std::string what;          // "stdout -> your terminal", for --json and messages
    int stream = -1;           // 0-2: the root's stdin/stdout/stderr that get it, -1 otherwise
    bool callers_own = false;  // the caller's own stream (so the caller's stdout is the process's)
  };
  std::vector<Inherited> inherit;
  std::vector<std::string> warnings;
};

// `files` is the checkpoint's META files, `roots` its META pid (and with META job_trees, the root
// of each of the job's trees: each root's stdio is the restoring caller's).
Result<StreamPlan> plan_streams(const std::vector<criu::OpenFile>& files,
                                const std::set<pid_t>& roots, const StreamOptions& options);
inline Result<StreamPlan> plan_streams(const std::vector<criu::OpenFile>& files, pid_t root,
                                       const StreamOptions& options) {
  return plan_streams(files, std::set<pid_t>{root}, options);
}

// The same from a checkpoint's META: its files, roots (pid, job_trees) and owner (owner_uid,
// owner_gid, which replace `options`').
Result<StreamPlan> plan_streams(const std::map<std::string, std::string>& meta,
                                StreamOptions options);

}  // namespace gcr::criu
