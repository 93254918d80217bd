// DumpParents: see dump_parents.h.
#include "dump_parents.h"

#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace gcr::gcrd {

struct DumpParents::State {
  std::mutex mu;
  std::map<std::pair<pid_t, std::uint64_t>, WorkDir> parents;  // by pid and start time
};

DumpParents& DumpParents::instance() {
  static DumpParents parents;
  return parents;
}

DumpParents::State& DumpParents::state() {
  static State s;
  return s;
}

std::optional<WorkDir> DumpParents::take(const ProcessKey& key) {
  State& s = state();
  std::lock_guard lock(s.mu);
  auto it = s.parents.find({key.pid, key.start_time});
  if (it == s.parents.end()) return std::nullopt;
  std::optional<WorkDir> out(std::move(it->second));
  s.parents.erase(it);
  return out;
}

void DumpParents::keep(const ProcessKey& key, WorkDir images) {
  std::vector<WorkDir> gone;  // removed outside the lock
  State& s = state();
  std::lock_guard lock(s.mu);
  for (auto it = s.parents.begin(); it != s.parents.end();) {
    if (same_process(ProcessKey{it->first.first, it->first.second})) {
      ++it;
      continue;
    }
    gone.push_back(std::move(it->second));
    it = s.parents.erase(it);
  }
  s.parents.insert_or_assign({key.pid, key.start_time}, std::move(images));
}

}  // namespace gcr::gcrd
