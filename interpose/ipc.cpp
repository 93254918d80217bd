// CUDA IPC and memory-pool sharing: forwarded to the driver, and counted as blockers (Note
// [Virtual allocation handles]) so that a process sharing memory or events with others is refused
// before anything stops rather than restored with the sharing silently gone.
#include <map>
#include <mutex>
#include <string>

#include "alloc.h"
#include "gate.h"
#include "real_driver.h"
#include "vmm_handles.h"

#undef cuIpcOpenMemHandle  // cuda.h maps it to _v2; the old name is exported as well

namespace gcr::interpose {
namespace {

std::mutex g_ipc_mu;
std::map<std::string, int> g_ipc_uses;  // what the process did, and how often it still holds it
int g_opened_memory = 0;                // cuIpcOpenMemHandle not yet closed

const char* const kOpenedMemory =
    "the process maps another process's device memory (cuIpcOpenMemHandle without "
    "cuIpcCloseMemHandle)";

// Forwards a sharing call; when it succeeds, what it did is a blocker from then on.
template <typename Fn, typename... Args>
CUresult forward_noting(const char* name, const char* blocker, Args... args) {
  const auto real = real_fn<Fn>(name);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real(args...);
  GateScope gate;
  CUresult r = real(args...);
  if (r == CUDA_SUCCESS) note_ipc_blocker(blocker);
  return r;
}

CUresult open_memory(CUdeviceptr* ptr, CUipcMemHandle handle, unsigned flags, const char* name) {
  const auto real = real_fn<decltype(&::cuIpcOpenMemHandle_v2)>(name);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real(ptr, handle, flags);
  GateScope gate;
  CUresult r = real(ptr, handle, flags);
  if (r == CUDA_SUCCESS) {
    std::lock_guard lock(g_ipc_mu);
    ++g_opened_memory;
  }
  return r;
}

}  // namespace

void note_ipc_blocker(const char* what) {
  std::lock_guard lock(g_ipc_mu);
  ++g_ipc_uses[what];
}

std::vector<std::string> ipc_blockers() {
  std::lock_guard lock(g_ipc_mu);
  std::vector<std::string> out;
  for (const auto& [what, n] : g_ipc_uses)
    if (n > 0)
      out.push_back(what + ": sharing between processes cannot be checkpointed by gcr yet");
  if (g_opened_memory > 0) out.push_back(std::string(kOpenedMemory) + ": not supported by gcr yet");
  return out;
}

extern "C" {

CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr ptr) {
  return forward_noting<decltype(&::cuIpcGetMemHandle)>(
      "cuIpcGetMemHandle", "device memory was exported to other processes with cuIpcGetMemHandle",
      handle, ptr);
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* ptr, CUipcMemHandle handle, unsigned int flags) {
  return open_memory(ptr, handle, flags, "cuIpcOpenMemHandle_v2");
}

CUresult cuIpcOpenMemHandle(CUdeviceptr* ptr, CUipcMemHandle handle, unsigned int flags) {
  return open_memory(ptr, handle, flags, "cuIpcOpenMemHandle");
}

CUresult cuIpcCloseMemHandle(CUdeviceptr ptr) {
  static const auto real = real_fn<decltype(&::cuIpcCloseMemHandle)>("cuIpcCloseMemHandle");
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real(ptr);
  GateScope gate;
  CUresult r = real(ptr);
  if (r == CUDA_SUCCESS) {
    std::lock_guard lock(g_ipc_mu);
    if (g_opened_memory > 0) --g_opened_memory;
  }
  return r;
}

CUresult cuIpcGetEventHandle(CUipcEventHandle* handle, CUevent event) {
  return forward_noting<decltype(&::cuIpcGetEventHandle)>(
      "cuIpcGetEventHandle", "an event was shared with other processes (cuIpcGetEventHandle)",
      handle, event);
}

CUresult cuIpcOpenEventHandle(CUevent* event, CUipcEventHandle handle) {
  return forward_noting<decltype(&::cuIpcOpenEventHandle)>(
      "cuIpcOpenEventHandle", "the process uses another process's event (cuIpcOpenEventHandle)",
      event, handle);
}

CUresult cuMemPoolExportToShareableHandle(void* handle, CUmemoryPool pool,
                                          CUmemAllocationHandleType type,
                                          unsigned long long flags) {
  return forward_noting<decltype(&::cuMemPoolExportToShareableHandle)>(
      "cuMemPoolExportToShareableHandle",
      "a memory pool was exported (cuMemPoolExportToShareableHandle)", handle, pool, type, flags);
}

CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool* pool, void* handle,
                                            CUmemAllocationHandleType type,
                                            unsigned long long flags) {
  return forward_noting<decltype(&::cuMemPoolImportFromShareableHandle)>(
      "cuMemPoolImportFromShareableHandle",
      "another process's memory pool was imported (cuMemPoolImportFromShareableHandle)", pool,
      handle, type, flags);
}

}  // extern "C"
}  // namespace gcr::interpose
