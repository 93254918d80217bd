// What the CRIU plugin does to a process's CUDA state, one method per hook. It knows the driver
// and ptrace, not CRIU: gcr_criu_plugin.cpp adapts these to CRIU's hooks and codes.
//
// Dump:    pause (PAUSE_DEVICES: lock, before CRIU seizes the task)
//          -> checkpoint (CHECKPOINT_DEVICES: the task is seized; Note [Restore thread])
//          -> release_paused (exit(DUMP): back to each task's initial state when the dump failed
//             or the tasks keep running; Note [Leave running])
// Restore: resume_restored (RESUME_DEVICES_LATE: restore onto the mapped GPUs, unlock).
#pragma once

#include <cuda.h>

#include <optional>
#include <vector>

#include "config.h"
#include "driver.h"
#include "gcr/result.h"

namespace gcr::criu_plugin {

// done: the step was this plugin's and succeeded; not_mine: pid is not a CUDA process, another
// plugin may act (CRIU's -ENOTSUP).
enum class Outcome { done, not_mine };

class DeviceSteps {
 public:
  DeviceSteps(Driver driver, Config config)
      : driver_(std::move(driver)), config_(std::move(config)) {}

  // Locks pid's CUDA API (a task already LOCKED or CHECKPOINTED is recorded and left so). The
  // lock waits up to GCR_LOCK_TIMEOUT_MS, never past CRIU's own --timeout alarm; on timeout the
  // task stays RUNNING and the dump fails.
  Result<Outcome> pause(int pid);

  // cuCheckpointProcessCheckpoint on a paused pid, running its restore thread. A pid that was
  // not paused but is a CUDA process now (cuInit finished between PAUSE_DEVICES and the seize)
  // fails the dump: retry it.
  Result<Outcome> checkpoint(int pid);

  // Restores a restored pid's CUDA state (onto GCR_DEVICE_MAP's GPUs) and unlocks it. On
  // failure the task is killed, so that CRIU's restore fails instead of resuming a process
  // whose first CUDA call would never return (CRIU ignores this hook's result).
  Result<Outcome> resume_restored(int pid);

  // Puts every paused task back in its initial state (restore, unlock), best effort: a failure
  // is logged and the next task is still tried. Returns the first failure.
  Status release_paused();

  bool any_paused() const { return !tasks_.empty(); }
  const Config& config() const { return config_; }

 private:
  struct Task {
    int pid;
    CUprocessState initial;
  };

  Task* find(int pid);
  Status return_to(const Task& task);
  Result<std::vector<CUcheckpointGpuPair>> gpu_pairs();
  unsigned lock_timeout_ms() const;

  Driver driver_;
  Config config_;
  std::vector<Task> tasks_;
  std::optional<std::vector<CUcheckpointGpuPair>> pairs_;  // GCR_DEVICE_MAP, resolved once
};

const char* state_name(CUprocessState state);

}  // namespace gcr::criu_plugin
