// A private scratch directory for one CRIU dump or restore (0700, under GCR_WORK_DIR, else
// /var/tmp/gcr-<uid>), removed when the owner goes away unless GCR_KEEP_WORK=1.
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

 private:
  std::filesystem::path path_;
  UniqueFd lock_;  // the directory, flock(LOCK_EX)ed
};

// The environment CRIU's gcr plugin needs to reach the same driver as gcrd (GCR_REAL_LIBCUDA).
std::map<std::string, std::string> driver_env();

}  // namespace gcr::gcrd
