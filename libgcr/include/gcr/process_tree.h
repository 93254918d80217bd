// What a process tree holds open and how it is connected to the world outside it: what CRIU
// needs told at a dump (--shell-job, external terminals), what gcr must refuse before anything is
// stopped (Note [Refused up front] in docs/processes.md), and what a restore reconnects (manifest
// META `files`, docs/image-format.md; Note [Streams reconnected by rule] in docs/processes.md).
//
// Read from /proc (and sock_diag for the peers of unix sockets) while the tree runs: it is a
// snapshot, taken just before the cut.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "gcr/result.h"

namespace gcr::criu {

enum class FileKind {
  regular,     // a file on a filesystem (a log, a data file, /dev/shm)
  deleted,     // a regular file deleted while open
  terminal,    // a tty: /dev/pts/N, /dev/ttyN, /dev/console
  pty_master,  // /dev/ptmx
  pipe,        // an anonymous pipe
  fifo,        // a named pipe
  dev_null,    // /dev/null, /dev/zero, /dev/urandom and other harmless character devices
  nvidia,      // /dev/nvidia*
  unix_socket,
  tcp_socket,
  udp_socket,
  other_socket,
  io_uring,
  anon,  // eventfd, timerfd, signalfd, inotify, epoll, memfd...: CRIU dumps them
  other,
};

const char* file_kind_name(FileKind kind) noexcept;
FileKind file_kind_from_name(const std::string& name) noexcept;

struct OpenFile {
  pid_t pid = 0;  // the task that holds it
  int fd = -1;
  FileKind kind = FileKind::other;
  std::string path;  // where /proc/PID/fd/N points: "/tmp/train.log", "pipe:[123]", "/dev/pts/3"
  // CRIU's --inherit-fd key for a connection a restore may hand a file of its own: the path without
  // its leading '/' for a regular file, "pipe:[INODE]", "tty[RDEV:DEV]" (hex). Empty otherwise.
  std::string key;
  int flags = 0;           // the open flags (O_ACCMODE, O_APPEND, ...), from fdinfo
  std::uint64_t size = 0;  // regular files: size and file position
  std::uint64_t pos = 0;
  // Connected to something outside the tree: a pipe whose other end, or a terminal whose master,
  // no task of the tree holds; a unix socket whose peer is outside; an established TCP connection.
  bool external = false;
  std::string detail;  // for refusals: "127.0.0.1:5000 -> 127.0.0.1:40112", a unix peer's inode
};

struct ProcessTree {
  pid_t root = 0;
  std::vector<pid_t> pids;  // root first, then its descendants
  bool root_is_session_leader = false;
  // The root's session leader is outside the root's pid namespace (its session id reads 0 there:
  // started under `unshare --pid --fork` or a runner that makes no session).
  bool session_outside_namespace = false;
  std::vector<OpenFile> files;  // every fd of every task
  // Regular files mapped into a task's memory (/proc/PID/maps), one entry per task and file:
  // fd -1, flags O_RDWR for a shared writable mapping, else O_RDONLY, size the file's. A restore
  // reopens what another user could have replaced without CRIU following a path (Note [Files
  // reopened for the restored process] in gcr/restore_streams.h).
  std::vector<OpenFile> mapped;

  // The --shell-job case: the root is not a session leader (a job of a shell, a pipeline member,
  // a child of a script) or holds a terminal of a session outside the tree.
  bool shell_job() const;
  // What `criu dump` needs beyond the usual: --shell-job, --external tty[...] per outside terminal.
  std::vector<std::string> dump_arguments() const;
  // A terminal of a session outside the tree is open in it (--external tty[...]).
  bool has_outside_terminal() const;
};

// Reads the tree rooted at `root` from /proc. Fails when root does not exist or cannot be read.
Result<ProcessTree> inspect_tree(pid_t root);

// root and its descendants as they are now (root first); {root} alone when it has none; none for
// a root of 0 or 1 (every process).
std::vector<pid_t> tree_pids(pid_t root);
// SIGKILL to root and its descendants as they are now, the youngest first.
void kill_tree(pid_t root);

// Each of these unix sockets (by inode; sock_diag, in gcr's network namespace) as it is now; a
// socket not found (closed) is left out.
struct UnixSocketState {
  int type = 0;              // SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET
  std::uint32_t queued = 0;  // bytes waiting in its receive queue, or sent and unread by its peer
};
std::map<std::uint64_t, UnixSocketState> unix_socket_states(const std::set<std::uint64_t>& inodes);

// Every pid in /proc (read with readdir; processes that come and go are no error).
std::vector<pid_t> proc_pids();
// The pids whose parent is `parent`, from /proc.
std::vector<pid_t> children_of(pid_t parent);
// Whether pid has a CUDA driver mapped (the NVIDIA driver, simgpu or gcr's interposer: each is a
// libcuda.so*); nullopt when its maps cannot be read (gone, or another user's).
std::optional<bool> maps_libcuda(pid_t pid);

// When pid started (field 22 of /proc/PID/stat, in clock ticks since boot); with the pid, which
// process it is (pids are reused). nullopt if it is gone.
std::optional<std::uint64_t> process_start_time(pid_t pid);

// The value of one line of /proc/PID/status ("TracerPid", "NSpid", ...), without the name, the
// colon and leading blanks; nullopt if the process is gone or has no such line.
std::optional<std::string> process_status_field(pid_t pid, std::string_view name);

struct Support {
  bool tcp_close = false;  // established TCP connections are dumped as closed (--tcp-close)
};

// Fails, naming the task, the fd and what it is, for what gcr cannot checkpoint and restore
// correctly: established TCP connections (unless tcp_close), unix sockets connected to processes
// outside the tree, io_uring instances, /dev/nvidia* opened by a task that does not use the CUDA
// driver, large files deleted while open. Each message says what to do.
Status check_supported(const ProcessTree& tree, const Support& support);

// Manifest META `files`: the connections a restore reconnects (every fd of the root's stdio, every
// regular file, every external pipe or terminal), one per line; see docs/image-format.md.
// (Mapped files are lines with fd -1.)
std::string encode_files(const ProcessTree& tree);
Result<std::vector<OpenFile>> decode_files(const std::string& text);

}  // namespace gcr::criu
