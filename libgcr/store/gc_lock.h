// GcLock: flock(2) on <store>/gc.lock (docs §6). Writers hold it shared from begin_checkpoint until
// commit or abort, readers while they open a checkpoint, verify while it reads; gc holds it
// exclusive. Each GcLock opens its own file description, so two in one process exclude each other
// as two processes would. Released when destroyed (or when the process dies: a crash never leaves
// the store locked).
#pragma once

#include <filesystem>

#include "gcr/result.h"
#include "gcr/unique_fd.h"

namespace gcr::store {

class GcLock {
 public:
  GcLock() = default;
  // Blocks until granted.
  static Result<GcLock> shared(const std::filesystem::path& path);
  static Result<GcLock> exclusive(const std::filesystem::path& path);
  bool held() const { return fd_.valid(); }
  void release() { fd_.reset(); }

 private:
  static Result<GcLock> take(const std::filesystem::path& path, int op);
  UniqueFd fd_;
};

}  // namespace gcr::store
