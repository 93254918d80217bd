// The driver's checkpoint API (cuCheckpointProcess*), called from inside CRIU on other processes.
//
// Note [Which libcuda]
// The plugin loads the driver itself, by absolute path: GCR_REAL_LIBCUDA if set, else the
// standard locations (the list the interposer uses). It never takes whatever "libcuda.so.1" the
// loader would find, because gcr's interposer is also named libcuda.so.1 and may be on the path:
// a candidate is skipped unless it defines cuCheckpointProcessLock itself, and skipped if it
// defines dlopen (the interposer's mark; a driver never exports it). Loading a candidate to look
// at it is harmless: neither simgpu nor the interposer does anything before cuInit.
//
// Only the checkpoint calls are needed to checkpoint and restore. cuInit and the device queries
// are made lazily, only to turn GCR_DEVICE_MAP ordinals into UUIDs at restore, after CRIU has
// forked the restored tasks (a driver initialised in CRIU before the fork would leak its threads'
// absence and its fds into them).
#pragma once

#include <cuda.h>

#include <string>
#include <vector>

#include "gcr/result.h"

namespace gcr::criu_plugin {

class Driver {
 public:
  // Loads the first usable driver (Note [Which libcuda]). Fails with not_found, naming every
  // candidate and why it was skipped, when there is none.
  static Result<Driver> load();

  const std::string& path() const { return path_; }

  // The tid of the driver's checkpoint thread inside pid. Fails when pid is not a CUDA process:
  // that failure is how the plugin tells "not mine".
  Result<int> restore_thread_id(int pid) const;
  Result<CUprocessState> state(int pid) const;

  // The state transitions (research §1a). lock fails with Errc::timeout after timeout_ms
  // (0: none), leaving pid RUNNING.
  Status lock(int pid, unsigned timeout_ms) const;
  Status checkpoint(int pid) const;
  Status restore(int pid, const std::vector<CUcheckpointGpuPair>& pairs) const;
  Status unlock(int pid) const;

  // The UUID of the device with this ordinal on this host; calls cuInit(0) on first use.
  Result<CUuuid> device_uuid(int ordinal) const;

 private:
  using GetRestoreThreadIdFn = CUresult (*)(int, int*);
  using GetStateFn = CUresult (*)(int, CUprocessState*);
  using LockFn = CUresult (*)(int, CUcheckpointLockArgs*);
  using CheckpointFn = CUresult (*)(int, CUcheckpointCheckpointArgs*);
  using RestoreFn = CUresult (*)(int, CUcheckpointRestoreArgs*);
  using UnlockFn = CUresult (*)(int, CUcheckpointUnlockArgs*);
  using InitFn = CUresult (*)(unsigned);
  using DeviceGetFn = CUresult (*)(CUdevice*, int);
  using DeviceGetCountFn = CUresult (*)(int*);
  using DeviceGetUuidFn = CUresult (*)(CUuuid*, CUdevice);
  using GetErrorNameFn = CUresult (*)(CUresult, const char**);

  Error driver_error(const char* call, int pid, CUresult r) const;

  std::string path_;
  GetRestoreThreadIdFn get_restore_thread_id_ = nullptr;
  GetStateFn get_state_ = nullptr;
  LockFn lock_ = nullptr;
  CheckpointFn checkpoint_ = nullptr;
  RestoreFn restore_ = nullptr;
  UnlockFn unlock_ = nullptr;
  InitFn init_ = nullptr;
  DeviceGetFn device_get_ = nullptr;
  DeviceGetCountFn device_get_count_ = nullptr;
  DeviceGetUuidFn device_get_uuid_ = nullptr;
  GetErrorNameFn get_error_name_ = nullptr;
};

}  // namespace gcr::criu_plugin
