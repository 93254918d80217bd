// What a `--gcr` job's checkpoint says of its Slurm step, in its labels (Note [The job's
// supervisor] in supervisor.h; docs/protocol.md §16): slurm.step, slurm.tasks (RANK:PID:NODE,
// ...) and slurm.nodes (each node's gcrd, in node order).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gcr/manifest.h"
#include "gcr/result.h"

namespace gcr::slurm {

struct Task {
  pid_t pid = 0;
  std::string gcrd;
  unsigned node = 0;
};

// A checkpoint of a step, as its labels say.
struct Plan {
  std::string name;
  std::uint32_t step = 0;
  std::map<unsigned, Task> tasks;  // by rank (gcrd unknown: see nodes)
  std::vector<std::string> nodes;  // each node's gcrd then, in node order
};

// slurm.tasks' value.
std::string tasks_label(const std::map<unsigned, Task>& tasks);
// Each node's gcrd, in node order; "" for a node with no task.
std::vector<std::string> node_gcrds(const std::map<unsigned, Task>& tasks);
std::string join(const std::vector<std::string>& words, char by);
// The labels of checkpoint `name`'s manifest; corrupt_image when they are missing or bad.
Result<Plan> plan_of(const store::Manifest& m, const std::string& name);

}  // namespace gcr::slurm
