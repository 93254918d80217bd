// `gcr slurm task -- CMD...`: one task of a `--gcr` step (Note [gcr under Slurm] in
// spank_gcr.cpp), exec'd by the plugin in the task's own process. It registers with the job's
// supervisor (Note [A task and its supervisor] in supervisor_wire.h) and then either becomes
// `gcr run -- CMD` (same pid: Slurm's task is the program) or, when the supervisor restored the
// step, stays as the task of the restored rank: it forwards the signals Slurm sends the task and
// ends when the rank ends.
#pragma once

#include <string>
#include <vector>

#include "gcr/result.h"

namespace gcr::slurm {

// Returns only on failure or when a restored rank ended (the task's exit code then).
Result<int> run_task(const std::vector<std::string>& command);

// Waits for process `pid` (not a child), forwarding the signals a task gets from Slurm to it;
// its exit code (0: a process that is not our child leaves none to read).
Result<int> stand_in_for(pid_t pid);

}  // namespace gcr::slurm
