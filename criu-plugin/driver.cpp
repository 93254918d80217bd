// Loading the driver's checkpoint API (Note [Which libcuda] in driver.h) and calling it.
#include "driver.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gcr/multiarch.h"
#include "gcr/trusted_path.h"

namespace gcr::criu_plugin {
namespace {

const char* const kStandardPaths[] = {
    GCR_MULTIARCH_LIBDIR "/libcuda.so.1",
    "/usr/lib64/libcuda.so.1",
    "/usr/lib/libcuda.so.1",
    "/usr/local/nvidia/lib64/libcuda.so.1",
    "/usr/lib/wsl/lib/libcuda.so.1",
    "/usr/local/cuda/compat/libcuda.so.1",
};

// The address of name if the object behind handle defines it itself, else nullptr: dlsym on a
// handle also searches the object's dependencies (libc defines dlopen for everyone).
void* own_symbol(void* handle, const char* name) {
  void* sym = dlsym(handle, name);
  if (!sym) return nullptr;
  link_map* lib = nullptr;
  link_map* owner = nullptr;
  Dl_info info{};
  if (dlinfo(handle, RTLD_DI_LINKMAP, &lib) != 0 ||
      !dladdr1(sym, &info, reinterpret_cast<void**>(&owner), RTLD_DL_LINKMAP))
    return nullptr;
  return owner == lib ? sym : nullptr;
}

template <typename Fn>
void resolve(void* handle, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(own_symbol(handle, name));
}

}  // namespace

Result<Driver> Driver::load() {
  std::vector<std::string> candidates;
  if (auto env = env_path_for_root("GCR_REAL_LIBCUDA")) candidates.emplace_back(env->string());
  for (const char* p : kStandardPaths) candidates.emplace_back(p);

  std::string skipped;
  auto skip = [&](const std::string& path, const std::string& why) {
    skipped += (skipped.empty() ? "" : "; ") + path + ": " + why;
  };
  for (const std::string& path : candidates) {
    if (path.empty() || path[0] != '/') {
      skip(path, "not an absolute path (GCR_REAL_LIBCUDA)");
      continue;
    }
    if (access(path.c_str(), R_OK) != 0) continue;  // absent: the usual case, not worth saying
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* why = dlerror();
      skip(path, why ? why : "dlopen failed");
      continue;
    }
    if (own_symbol(h, "dlopen")) {
      skip(path, "gcr's interposer, not a driver");
      dlclose(h);
      continue;
    }
    Driver d;
    d.path_ = path;
    resolve(h, "cuCheckpointProcessGetRestoreThreadId", &d.get_restore_thread_id_);
    resolve(h, "cuCheckpointProcessGetState", &d.get_state_);
    resolve(h, "cuCheckpointProcessLock", &d.lock_);
    resolve(h, "cuCheckpointProcessCheckpoint", &d.checkpoint_);
    resolve(h, "cuCheckpointProcessRestore", &d.restore_);
    resolve(h, "cuCheckpointProcessUnlock", &d.unlock_);
    if (!d.get_restore_thread_id_ || !d.get_state_ || !d.lock_ || !d.checkpoint_ || !d.restore_ ||
        !d.unlock_) {
      skip(path, "no checkpoint API (cuCheckpointProcess*: driver r570 or newer)");
      dlclose(h);
      continue;
    }
    resolve(h, "cuInit", &d.init_);
    resolve(h, "cuDeviceGet", &d.device_get_);
    resolve(h, "cuDeviceGetCount", &d.device_get_count_);
    resolve(h, "cuDeviceGetUuid_v2", &d.device_get_uuid_);
    if (!d.device_get_uuid_) resolve(h, "cuDeviceGetUuid", &d.device_get_uuid_);
    resolve(h, "cuGetErrorName", &d.get_error_name_);
    return d;  // the handle stays open for the life of CRIU
  }
  std::string msg = "no CUDA driver with the checkpoint API";
  msg += skipped.empty()
             ? " (none in the standard locations; set GCR_REAL_LIBCUDA to its absolute path)"
             : " (" + skipped + ")";
  return make_error(Errc::not_found, msg);
}

Error Driver::driver_error(const char* call, int pid, CUresult r) const {
  const char* name = nullptr;
  if (!get_error_name_ || get_error_name_(r, &name) != CUDA_SUCCESS || !name) name = "CUDA error";
  Errc code = r == CUDA_ERROR_NOT_READY       ? Errc::timeout
              : r == CUDA_ERROR_NOT_PERMITTED ? Errc::permission_denied
              : r == CUDA_ERROR_OUT_OF_MEMORY ? Errc::out_of_memory
                                              : Errc::driver;
  std::string what = std::string(call) + (pid > 0 ? "(pid " + std::to_string(pid) + ")" : "");
  return make_error(code, what + ": " + name + " (" + std::to_string(static_cast<int>(r)) + ")");
}

Result<int> Driver::restore_thread_id(int pid) const {
  int tid = 0;
  if (CUresult r = get_restore_thread_id_(pid, &tid))
    return driver_error("cuCheckpointProcessGetRestoreThreadId", pid, r);
  return tid;
}

Result<CUprocessState> Driver::state(int pid) const {
  CUprocessState s{};
  if (CUresult r = get_state_(pid, &s)) return driver_error("cuCheckpointProcessGetState", pid, r);
  return s;
}

Status Driver::lock(int pid, unsigned timeout_ms) const {
  CUcheckpointLockArgs args{};
  args.timeoutMs = timeout_ms;
  if (CUresult r = lock_(pid, &args)) return driver_error("cuCheckpointProcessLock", pid, r);
  return ok();
}

Status Driver::checkpoint(int pid) const {
  CUcheckpointCheckpointArgs args{};
  if (CUresult r = checkpoint_(pid, &args)) {
    Error e = driver_error("cuCheckpointProcessCheckpoint", pid, r);
    if (r == CUDA_ERROR_NOT_SUPPORTED)  // what drivers before 610 refuse (and simgpu as they do)
      e.message += " (the process shares device memory with another process: CUDA IPC, an "
                   "exported handle, or gcrd's after a `gcr checkpoint -R` of it; the driver's "
                   "checkpoint takes none of these: checkpoint it without --stop-copy)";
    return e;
  }
  return ok();
}

Status Driver::restore(int pid, const std::vector<CUcheckpointGpuPair>& pairs) const {
  CUcheckpointRestoreArgs args{};  // the same 64 bytes in 13.0 and 13.4: pairs first, rest zero
  std::vector<CUcheckpointGpuPair> copy = pairs;
  if (!copy.empty()) {
    args.gpuPairs = copy.data();
    args.gpuPairsCount = static_cast<unsigned>(copy.size());
  }
  if (CUresult r = restore_(pid, &args)) return driver_error("cuCheckpointProcessRestore", pid, r);
  return ok();
}

Status Driver::unlock(int pid) const {
  CUcheckpointUnlockArgs args{};
  if (CUresult r = unlock_(pid, &args)) return driver_error("cuCheckpointProcessUnlock", pid, r);
  return ok();
}

Result<CUuuid> Driver::device_uuid(int ordinal) const {
  if (!init_ || !device_get_ || !device_get_uuid_)
    return make_error(Errc::unsupported, path_ + " lacks cuInit/cuDeviceGet/cuDeviceGetUuid");
  if (CUresult r = init_(0)) return driver_error("cuInit", 0, r);
  int count = 0;
  if (device_get_count_ && device_get_count_(&count) == CUDA_SUCCESS && ordinal >= count)
    return make_error(Errc::not_found, "device " + std::to_string(ordinal) +
                                           " does not exist (this host has " +
                                           std::to_string(count) + ")");
  CUdevice dev = 0;
  if (CUresult r = device_get_(&dev, ordinal)) return driver_error("cuDeviceGet", 0, r);
  CUuuid uuid{};
  if (CUresult r = device_get_uuid_(&uuid, dev)) return driver_error("cuDeviceGetUuid", 0, r);
  return uuid;
}

}  // namespace gcr::criu_plugin
