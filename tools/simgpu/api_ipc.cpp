// Legacy CUDA IPC: cuIpcGetMemHandle/OpenMemHandle/CloseMemHandle for cuMemAlloc memory and
// cuIpcGetEventHandle/OpenEventHandle for CU_EVENT_INTERPROCESS events (ipc.h has the handles).
//
// As the driver documents: a handle opened again by the context that opened it returns the same
// pointer and counts a reference; each device's handles may be opened by one context per device
// per other process (another context gets CUDA_ERROR_ALREADY_MAPPED here); the importer's address
// is its own choice, not the exporter's. Opening a handle in the process that exported it fails
// with CUDA_ERROR_INVALID_CONTEXT, as on the real driver.
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "ipc.h"
#include "simgpu.h"

#undef cuIpcOpenMemHandle  // cuda.h names it cuIpcOpenMemHandle_v2; both are exported

using namespace gcr::simgpu;
using gcr::UniqueFd;

namespace {

constexpr std::uint64_t kPage = 4096;

bool zero(const std::uint8_t* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (p[i]) return false;
  return true;
}

CUresult open_mem_handle(CUdeviceptr* pdptr, const CUipcMemHandle& raw, unsigned flags) {
  SIMGPU_API_BEGIN();
  if (!pdptr || (flags & ~CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx;
  if (CUresult r = require_context(&ctx)) return r;
  IpcMemHandle h;
  std::memcpy(&h, &raw, sizeof h);
  if (std::memcmp(h.magic, kIpcMemMagic, sizeof h.magic) != 0 ||
      !zero(h.reserved, sizeof h.reserved) || h.size == 0 || h.offset % kHeapAlign != 0)
    return CUDA_ERROR_INVALID_HANDLE;
  if (h.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT;
  {
    std::lock_guard lock(g_mem.mu);
    for (auto& [addr, o] : g_mem.ipc_openings) {
      if (o.exporter != h.pid || o.inode != h.inode || o.offset != h.offset ||
          o.alloc_id != h.alloc_id)
        continue;
      if (o.ctx != ctx) return CUDA_ERROR_ALREADY_MAPPED;
      ++o.refs;
      *pdptr = addr;
      return CUDA_SUCCESS;
    }
  }
  UniqueFd fd;
  if (CUresult r = open_peer_fd(h.pid, h.fd, h.inode, &fd)) return r;
  struct stat st {};
  if (fstat(fd.get(), &st) != 0 || h.offset + h.size < h.offset ||
      h.offset + h.size > static_cast<std::uint64_t>(st.st_size))
    return CUDA_ERROR_INVALID_HANDLE;
  // mmap maps whole pages: the window starts at the page holding the allocation (whose
  // neighbours on that page the importer can then reach, as a GPU maps whole pages too).
  std::uint64_t page_offset = h.offset / kPage * kPage;
  std::uint64_t span = (h.offset + h.size + kPage - 1) / kPage * kPage - page_offset;
  int dev = ordinal_of_physical(h.device);
  auto p = std::make_shared<PhysAlloc>();
  p->fd = std::move(fd);
  p->size = span;
  p->device = valid_device(dev) ? dev : ctx->device;
  p->imported = p->ipc = true;
  p->handle_refs = 0;  // no allocation handle stands for it
  p->mappings = 1;
  std::lock_guard lock(g_mem.mu);
  std::uint64_t reserve = (span + kGranularity - 1) / kGranularity * kGranularity;
  DevAddr addr;
  if (!take_va(reserve, kGranularity, 0, &addr)) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!map_alias(addr, span, p->fd.get(), page_offset, PROT_READ | PROT_WRITE)) {
    give_va(addr, reserve);
    return CUDA_ERROR_MAP_FAILED;
  }
  p->id = g_mem.next_id++;
  g_mem.mappings[addr] = VmmMapping{addr, span, p, page_offset, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  DevAddr result = addr + (h.offset - page_offset);
  g_mem.ipc_openings[result] =
      IpcOpening{result, addr, reserve, ctx, 1, h.pid, h.inode, h.offset, h.alloc_id};
  *pdptr = result;
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuIpcGetMemHandle(CUipcMemHandle* out, CUdeviceptr dptr) {
  SIMGPU_API_BEGIN();
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx;
  if (CUresult r = require_context(&ctx)) return r;
  std::lock_guard lock(g_mem.mu);
  auto it = g_mem.heap_allocs.find(dptr);
  // The base of a cuMemAlloc allocation only: not an interior pointer, not VMM or pool memory.
  if (it == g_mem.heap_allocs.end() || it->second.pool) return CUDA_ERROR_INVALID_VALUE;
  if (!g_mem.heap_fd) return CUDA_ERROR_ILLEGAL_STATE;  // checkpointed
  HeapAlloc& a = it->second;
  a.ipc_exported = true;
  IpcMemHandle h{};
  std::memcpy(h.magic, kIpcMemMagic, sizeof h.magic);
  h.pid = getpid();
  h.fd = g_mem.heap_fd.get();
  h.inode = inode_of(g_mem.heap_fd.get());
  h.offset = a.addr - g_va.heap_base;
  h.size = a.size;
  h.alloc_id = a.buffer_id;
  h.device = physical_device(a.device);
  std::memcpy(out, &h, sizeof h);
  return CUDA_SUCCESS;
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags) {
  return open_mem_handle(pdptr, handle, flags);
}
CUresult cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags) {
  return open_mem_handle(pdptr, handle, flags);
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  SIMGPU_API_BEGIN();
  CUctx_st* ctx;
  if (CUresult r = require_context(&ctx)) return r;
  {
    std::lock_guard lock(g_mem.mu);
    auto it = g_mem.ipc_openings.find(dptr);
    if (it == g_mem.ipc_openings.end()) return CUDA_ERROR_INVALID_VALUE;
    if (--it->second.refs > 0) return CUDA_SUCCESS;
  }
  // The unmap does not wait for the device: drain first, as cuMemUnmap does.
  {
    OutsideGate wait;
    drain_all_streams();
  }
  std::lock_guard lock(g_mem.mu);
  auto it = g_mem.ipc_openings.find(dptr);
  if (it == g_mem.ipc_openings.end() || it->second.refs > 0) return CUDA_SUCCESS;
  IpcOpening o = it->second;
  g_mem.ipc_openings.erase(it);
  auto m = g_mem.mappings.find(o.map_addr);
  if (m != g_mem.mappings.end()) {
    unmap_alias(m->first, m->second.size);
    g_mem.mappings.erase(m);
  }
  give_va(o.map_addr, o.map_size);
  return CUDA_SUCCESS;
}

CUresult cuIpcGetEventHandle(CUipcEventHandle* out, CUevent e) {
  SIMGPU_API_BEGIN();
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (!e || e->magic != 0x45565431) return CUDA_ERROR_INVALID_HANDLE;
  if (!e->shared) return CUDA_ERROR_INVALID_HANDLE;  // not created with CU_EVENT_INTERPROCESS
  IpcEventHandle h{};
  std::memcpy(h.magic, kIpcEventMagic, sizeof h.magic);
  h.pid = getpid();
  h.fd = e->shared_fd.get();
  h.inode = inode_of(e->shared_fd.get());
  std::memcpy(out, &h, sizeof h);
  return CUDA_SUCCESS;
}

CUresult cuIpcOpenEventHandle(CUevent* ph, CUipcEventHandle handle) {
  SIMGPU_API_BEGIN();
  if (!ph) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx;
  if (CUresult r = require_context(&ctx)) return r;
  IpcEventHandle h;
  std::memcpy(&h, &handle, sizeof h);
  if (std::memcmp(h.magic, kIpcEventMagic, sizeof h.magic) != 0 ||
      !zero(h.reserved, sizeof h.reserved))
    return CUDA_ERROR_INVALID_HANDLE;
  if (h.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT;
  auto e = std::make_unique<CUevent_st>();
  // "behaves like a locally created event with the CU_EVENT_DISABLE_TIMING flag specified"
  e->flags = CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  e->ctx = ctx;
  if (CUresult r = open_shared_event(h, e.get())) return r;
  *ph = e.release();
  return CUDA_SUCCESS;
}

}  // extern "C"
