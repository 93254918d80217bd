// A private scratch directory for one CRIU dump or restore (0700), removed when the owner goes
// away unless GCR_KEEP_WORK=1. They live in gcrd's work root: GCR_WORK_DIR, else
// /var/lib/gcr/work for root, else $XDG_RUNTIME_DIR/gcr/work, else /var/tmp/gcr-<uid>; a root
// that is not private (Note [Private directories] in gcr/private_dir.h: another user made it
// first, it is writable by others, a symlink) is refused, and so is every dump and restore.
//
// Its owner holds flock(LOCK_EX) on it, taken before the directory gets its name, so that one a
// dead gcrd left behind (a CRIU image of a process's memory: up to all of it with --stop-copy)
// is told apart from one in use: create() removes every unlocked one it finds.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <sys/types.h>

#include "gcr/result.h"
#include "gcr/unique_fd.h"

namespace gcr::gcrd {

// Note [Dumping into memory]
// CRIU writes a process's host memory into its image directory while the process is frozen, so
// the freeze lasts as long as that write. With GCR_MEMORY_WORK_DIR set, a checkpoint's image
// directory goes there (meant for a tmpfs) when the process's memory fits with room to spare (its
// resident size against the file system's free space and the machine's available memory), and to
// the work root otherwise; the images are stored, and the directory removed, after the process
// runs again. It must be private like the work root, else the work root is used. Not the default:
// measured on this VM for 1 GiB of host memory, CRIU's dump took 0.76-0.89 s into tmpfs and
// 0.48-0.54 s into the disk's page cache, but 4.7 s on disk while writeback of earlier writes was
// under way; a memory directory keeps the freeze off a busy or slow disk, at a cost when the disk
// is idle. ("off" or unset: the work root.)
class WorkDir {
 public:
  static Result<WorkDir> create(const std::string& purpose);
  // For a CRIU dump of about `memory_bytes` of host memory: in the memory root when it fits there
  // (Note [Dumping into memory]), else as create("ckpt"). `in_memory` says which.
  static Result<WorkDir> create_for_dump(std::uint64_t memory_bytes, bool* in_memory);
  WorkDir() = default;
  WorkDir(WorkDir&& o) noexcept : path_(std::move(o.path_)), lock_(std::move(o.lock_)) {
    o.path_.clear();
  }
  WorkDir& operator=(WorkDir&& o) noexcept;
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;
  ~WorkDir();
  const std::filesystem::path& path() const { return path_; }
  int fd() const { return lock_.get(); }  // the directory itself

 private:
  std::filesystem::path path_;
  UniqueFd lock_;  // the directory, flock(LOCK_EX)ed
};

// The resident memory of these processes (VmRSS), what a dump of them writes at most.
std::uint64_t resident_bytes(const std::vector<pid_t>& pids);

// gcrd's work root (see above), and it opened after the privacy check.
std::filesystem::path work_root();
Result<UniqueFd> open_work_root();

// The environment CRIU's gcr plugin needs to reach the same driver as gcrd (GCR_REAL_LIBCUDA).
std::map<std::string, std::string> driver_env();

}  // namespace gcr::gcrd
