// work_registry.h.
#include "work_registry.h"

namespace gcr::gcrd {

void WorkRegistry::set(pid_t pid, Work work) {
  std::lock_guard lock(mu_);
  work_[pid] = std::move(work);
}

void WorkRegistry::erase(pid_t pid) {
  std::lock_guard lock(mu_);
  work_.erase(pid);
}

std::map<pid_t, WorkRegistry::Work> WorkRegistry::snapshot() const {
  std::lock_guard lock(mu_);
  return work_;
}

}  // namespace gcr::gcrd
