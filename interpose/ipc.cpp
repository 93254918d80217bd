// CUDA IPC events and memory-pool sharing (IPC memory: ipc_memory.cpp): forwarded to the driver,
// and counted as blockers (Note
// [Virtual allocation handles]) so that a process sharing memory or events with others is refused
// before anything stops rather than restored with the sharing silently gone.
#include <map>
#include <mutex>
#include <string>

#include "alloc.h"
#include "gate.h"
#include "locks.h"
#include "real_driver.h"
#include "vmm_handles.h"

namespace gcr::interpose {
namespace {

// What the process shares with others, and how often it still holds each: the blockers.
struct Sharing {
  RankedMutex mu{LockRank::sharing};
  std::map<std::string, int> uses GCR_GUARDED_BY(mu);
};
Sharing g_sharing;

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

}  // namespace

void note_ipc_blocker(const char* what) {
  MutexLock lock(g_sharing.mu);
  ++g_sharing.uses[what];
}

void forget_ipc_blocker(const char* what) {
  MutexLock lock(g_sharing.mu);
  if (auto it = g_sharing.uses.find(what); it != g_sharing.uses.end() && it->second > 0)
    --it->second;
}

std::vector<std::string> ipc_blockers() {
  MutexLock lock(g_sharing.mu);
  std::vector<std::string> out;
  for (const auto& [what, n] : g_sharing.uses)
    if (n > 0) out.push_back(what);
  return out;
}

extern "C" {

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

// Memory of another API (Vulkan, a dma-buf): outside gcr's regions, and not something the driver's
// checkpoint can carry either, so it blocks a checkpoint for as long as the process holds it.
constexpr const char* kExternalMemoryBlocker =
    "the process imported external memory (cuImportExternalMemory)";

CUresult cuImportExternalMemory(CUexternalMemory* memory,
                                const CUDA_EXTERNAL_MEMORY_HANDLE_DESC* description) {
  return forward_noting<decltype(&::cuImportExternalMemory)>(
      "cuImportExternalMemory", kExternalMemoryBlocker, memory, description);
}

CUresult cuDestroyExternalMemory(CUexternalMemory memory) {
  static const auto real = real_fn<decltype(&::cuDestroyExternalMemory)>("cuDestroyExternalMemory");
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real(memory);
  GateScope gate;
  CUresult r = real(memory);
  if (r == CUDA_SUCCESS) forget_ipc_blocker(kExternalMemoryBlocker);
  return r;
}

}  // extern "C"
}  // namespace gcr::interpose
