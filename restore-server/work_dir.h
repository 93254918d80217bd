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

#include <filesystem>
#include <map>
#include <string>

#include "gcr/result.h"
#include "gcr/unique_fd.h"

namespace gcr::gcrd {

class WorkDir {
 public:
  static Result<WorkDir> create(const std::string& purpose);
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

// gcrd's work root (see above), and it opened after the privacy check.
std::filesystem::path work_root();
Result<UniqueFd> open_work_root();

// The environment CRIU's gcr plugin needs to reach the same driver as gcrd (GCR_REAL_LIBCUDA).
std::map<std::string, std::string> driver_env();

}  // namespace gcr::gcrd
