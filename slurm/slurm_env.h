// What Slurm and gcr's SPANK plugin put in a job's environment (Note [gcr under Slurm] in
// spank_gcr.cpp), read once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "gcr/result.h"
#include "gcr/settings.h"

namespace gcr::slurm {

struct SlurmEnv {
  std::uint32_t job = 0;   // SLURM_JOB_ID
  unsigned restarts = 0;   // SLURM_RESTART_COUNT: the job's requeues so far
  std::uint32_t step = 0;  // SLURM_STEP_ID (a task's)
  unsigned procid = 0;     // SLURM_PROCID: the task's rank in its step
  unsigned ntasks = 1;     // SLURM_STEP_NUM_TASKS (else SLURM_NTASKS)
  unsigned node = 0;       // SLURM_NODEID: the node's index in the step
  std::string node_name;   // SLURMD_NODENAME
  std::string token_file;  // GCR_SLURM_TOKEN_FILE: the gcrds' key (plugstack.conf token=)
  std::string store;       // GCR_SLURM_STORE: where checkpoints go (plugstack.conf store=)
  std::string supervisor;  // GCR_SLURM_SUPERVISOR: HOST:PORT of the batch script's gcr
  std::string key;         // GCR_SLURM_KEY: what a task tells the supervisor
  // --gcr=OPTIONS (GCR_SLURM_OPTIONS), comma-separated:
  std::string every;  // every=DURATION: a checkpoint each period too (as gcr run's)
  int signal = 10;    // signal=NAME: the one that means "checkpoint, then requeue"
};

// The job's environment (through gcr's one reader of it, gcr/settings.h; tests pass a stand-in);
// an error names the variable and says what it should hold.
Result<SlurmEnv> read_slurm_env(bool task, const EnvLookup& lookup = env_lookup);

// "USR1", "SIGUSR1" or a number; nullopt when none of these.
std::optional<int> parse_signal(const std::string& text);

}  // namespace gcr::slurm
