// Note [IPC memory under gcr]
// cuMemAlloc memory is a region of gcr's (VMM memory, Note [Regions and slabs]), and a driver
// refuses legacy IPC on VMM memory: without help, a program that shares memory through
// cuIpcGetMemHandle works alone and fails under gcr. So the handle is gcr's own 64-byte token:
//
//     0   8  magic "gcrIPC1\0"       24  8  region size
//     8   4  owner pid               32  8  allocation offset in the region
//     12  4  fd in the owner         40  8  allocation size
//     16  8  region address          48  8  inode of that fd (checked by the importer)
//
// The owner exports the region as a POSIX fd once and keeps it open (closed when the region
// goes); the importer takes that fd from the owner (pidfd_getfd, else /proc/PID/fd/N), imports
// it, maps the region at an address of its arena (a region of its own, Note [Shared regions] in
// vmm_handles.h) and returns the allocation's place in it. Opening a token again returns the same
// pointer (counted), as the driver does. A job checkpoint stores such memory once and gives every
// process that mapped it the same memory back at its address. Park closes the owner's cached
// export fd (it holds the memory) and unpark exports it again at the same fd number, so a token
// taken before a --leave-running checkpoint still opens after it; after a restore the memory is
// another file, and a token taken before it fails the inode check (take it again).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

#include "alloc.h"
#include "cut.h"
#include "gate.h"
#include "real_driver.h"
#include "regions.h"
#include "vmm_handles.h"

#undef cuIpcOpenMemHandle  // cuda.h maps it to _v2; the old name is exported as well

namespace gcr::interpose {
namespace {

constexpr char kMagic[8] = {'g', 'c', 'r', 'I', 'P', 'C', '1', '\0'};

struct Token {
  char magic[8];
  std::uint32_t pid;
  std::int32_t fd;
  std::uint64_t region_address, region_size, offset, size, inode;
};
static_assert(sizeof(Token) <= sizeof(CUipcMemHandle));

struct Opened {
  CUdeviceptr base = 0;  // the region's mapping here
  std::uint64_t size = 0;
  std::uint64_t offset = 0;
  int count = 0;
};

// Regions shared through CUDA IPC, as their owner and as an importer.
struct IpcMemory {
  RankedMutex mu{LockRank::ipc_memory};
  // Owner side: region id -> the fd exported for IPC; its share keys (Note [Shared regions]);
  // the fd number it had before a park.
  std::map<std::uint32_t, int> exported_fds GCR_GUARDED_BY(mu);
  std::map<std::uint32_t, std::vector<std::uint64_t>> export_keys GCR_GUARDED_BY(mu);
  std::map<std::uint32_t, int> parked_exports GCR_GUARDED_BY(mu);
  // Importer side: by owner pid, inode, region address and offset.
  std::map<std::tuple<std::uint32_t, std::uint64_t, std::uint64_t, std::uint64_t>, Opened> opened
      GCR_GUARDED_BY(mu);
};
IpcMemory g_ipc;

// The owner's fd, as a file of this process: pidfd_getfd (needs ptrace rights over the owner),
// else /proc/PID/fd/N (an open of the file itself: simgpu's memfds).
int take_fd(pid_t pid, int fd) {
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    int got = static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, fd, 0));
    ::close(pidfd);
    if (got >= 0) return got;
  }
  std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  return ::open(path.c_str(), O_RDWR | O_CLOEXEC);
}

CUresult open_token(CUdeviceptr* ptr, const Token& t) {
  const RealDriver* real = real_driver();
  if (t.pid == static_cast<std::uint32_t>(getpid())) return CUDA_ERROR_INVALID_CONTEXT;
  MutexLock region_lock(g_region_mu);  // before g_ipc.mu, as everywhere
  MutexLock lock(g_ipc.mu);
  auto key = std::make_tuple(t.pid, t.inode, t.region_address, t.offset);
  if (auto it = g_ipc.opened.find(key); it != g_ipc.opened.end()) {
    ++it->second.count;
    *ptr = it->second.base + t.offset;
    return CUDA_SUCCESS;
  }
  if (t.region_size == 0 || t.region_size % kGranule) return CUDA_ERROR_INVALID_HANDLE;
  int fd = take_fd(static_cast<pid_t>(t.pid), t.fd);
  if (fd < 0) return CUDA_ERROR_INVALID_HANDLE;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_ino) != t.inode) {
    ::close(fd);
    return CUDA_ERROR_INVALID_HANDLE;  // the owner is gone, or the fd is another file now
  }
  const std::uint64_t share_key = share_key_of_fd(fd);
  CUmemGenericAllocationHandle h = 0;
  CUresult r = real->cuMemImportFromShareableHandle(
      &h, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)),
      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  ::close(fd);
  if (r != CUDA_SUCCESS) return r;
  CUmemAllocationProp prop{};
  (void)real->cuMemGetAllocationPropertiesFromHandle(&prop, h);
  // The mapping is a region of the arena (Note [Shared regions]): parked, tracked and restored
  // at this address like any other.
  std::uint64_t va = 0;
  if (ensure_arena() != CUDA_SUCCESS || !arena_take(t.region_size, kGranule, &va)) {
    real->cuMemRelease(h);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUdevice device = 0;
  if (real->cuCtxGetDevice(&device) != CUDA_SUCCESS) device = prop.location.id;
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  r = real->cuMemMap(va, t.region_size, 0, h, 0);
  if (r == CUDA_SUCCESS) {
    r = real->cuMemSetAccess(va, t.region_size, &access, 1);
    if (r != CUDA_SUCCESS) real->cuMemUnmap(va, t.region_size);
  }
  if (r != CUDA_SUCCESS) {
    real->cuMemRelease(h);
    arena_give(va, t.region_size);
    return r;
  }
  CUmemGenericAllocationHandle vh = valloc_add(h, t.region_size, prop, AllocationOrigin::imported);
  VirtualAllocation* v = valloc_find(vh);
  v->program_refs = 0;  // the program holds the mapping, not a handle
  add_share_key(v->share_keys, share_key);
  std::uint32_t id =
      register_user_region(va, t.region_size, 0, static_cast<std::uint32_t>(device), valloc_id(vh));
  if (!id) {
    real->cuMemUnmap(va, t.region_size);
    v->program_refs = 1;
    valloc_release_if_unused(valloc_id(vh));
    arena_give(va, t.region_size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  ++v->mappings;
  mark_region_shared(id);
  g_ipc.opened[key] = Opened{va, t.region_size, t.offset, 1};
  *ptr = va + t.offset;
  return CUDA_SUCCESS;
}

CUresult open_memory(CUdeviceptr* ptr, CUipcMemHandle handle, unsigned flags, const char* name) {
  const auto real = real_fn<decltype(&::cuIpcOpenMemHandle_v2)>(name);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged) return real(ptr, handle, flags);
  GateScope gate;
  Token t;
  std::memcpy(&t, handle.reserved, sizeof t);
  if (std::memcmp(t.magic, kMagic, sizeof kMagic) != 0) {
    CUresult r = real(ptr, handle, flags);  // a driver's own handle: from a process not under gcr
    if (r == CUDA_SUCCESS) note_ipc_blocker(kOpenedMemoryBlocker);
    return r;
  }
  if (!ptr) return CUDA_ERROR_INVALID_VALUE;
  return open_token(ptr, t);
}

}  // namespace

std::size_t ipc_memory_opened() {
  MutexLock lock(g_ipc.mu);
  return g_ipc.opened.size();
}

void ipc_forget_region(std::uint32_t region_id) {
  MutexLock lock(g_ipc.mu);
  g_ipc.export_keys.erase(region_id);
  if (auto it = g_ipc.exported_fds.find(region_id); it != g_ipc.exported_fds.end()) {
    ::close(it->second);
    g_ipc.exported_fds.erase(it);
  }
}

std::vector<std::uint64_t> ipc_export_keys(std::uint32_t region_id) {
  MutexLock lock(g_ipc.mu);
  auto it = g_ipc.export_keys.find(region_id);
  return it == g_ipc.export_keys.end() ? std::vector<std::uint64_t>{} : it->second;
}

void ipc_set_export_key(std::uint32_t region_id, std::uint64_t key) {
  MutexLock lock(g_ipc.mu);
  if (auto it = g_ipc.export_keys.find(region_id); it != g_ipc.export_keys.end())
    it->second = {key};
}

void ipc_close_exports() {
  MutexLock lock(g_ipc.mu);
  for (auto& [id, fd] : g_ipc.exported_fds) {
    ::close(fd);
    g_ipc.parked_exports[id] = fd;
  }
  g_ipc.exported_fds.clear();
}

void ipc_reopen_exports() {
  MutexLock lock(g_ipc.mu);
  for (auto& [id, number] : g_ipc.parked_exports) {
    const Region& reg = g_regions[id];
    if (reg.kind == RegionKind::free || !reg.handle) continue;
    int fresh = -1;
    if (real_driver()->cuMemExportToShareableHandle(
            &fresh, reg.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) != CUDA_SUCCESS)
      continue;  // exported again on the next cuIpcGetMemHandle
    // The same number when it is still free: tokens given out name it (Note [IPC memory under
    // gcr]); a restore gives the memory another identity, and their inode check then fails.
    int fd = fresh;
    if (::fcntl(number, F_GETFD) == -1 && errno == EBADF &&
        ::dup3(fresh, number, O_CLOEXEC) == number) {
      ::close(fresh);
      fd = number;
    }
    g_ipc.exported_fds[id] = fd;
    add_share_key(g_ipc.export_keys[id], share_key_of_fd(fd));
  }
  g_ipc.parked_exports.clear();
}

// Closes gcr's mapping of another process's memory at ptr (one use of it); nullopt when ptr is
// not one gcr opened.
static std::optional<CUresult> close_opened(CUdeviceptr ptr) GCR_REQUIRES(g_region_mu, g_ipc.mu) {
  for (auto it = g_ipc.opened.begin(); it != g_ipc.opened.end(); ++it) {
    Opened& o = it->second;
    if (ptr != o.base + o.offset) continue;
    if (--o.count > 0) return CUDA_SUCCESS;
    const RealDriver* d = real_driver();
    // As the driver's close: work still queued on the memory finishes first.
    if (CUresult r = d->cuCtxSynchronize(); r != CUDA_SUCCESS) {
      ++o.count;
      return r;
    }
    d->cuMemUnmap(o.base, o.size);
    for (std::uint32_t id : unregister_user_regions(o.base, o.size)) {
      if (VirtualAllocation* v = valloc_by_id(id); v && v->mappings) --v->mappings;
      valloc_release_if_unused(id);
    }
    arena_give(o.base, o.size);
    g_ipc.opened.erase(it);
    return CUDA_SUCCESS;
  }
  return std::nullopt;
}

extern "C" {

CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr ptr) {
  static const auto real = real_fn<decltype(&::cuIpcGetMemHandle)>("cuIpcGetMemHandle");
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_unmanaged || !handle) return real(handle, ptr);
  GateScope gate;
  MutexLock lock(g_region_mu);
  CUdeviceptr base = 0;
  std::uint64_t size = 0;
  if (!in_arena(ptr) || !find_allocation(ptr, &base, &size)) {
    CUresult r = real(handle, ptr);  // not cuMemAlloc memory of gcr's: the driver decides
    if (r == CUDA_SUCCESS) note_ipc_blocker(kExportedMemoryBlocker);
    return r;
  }
  if (base != ptr) return CUDA_ERROR_INVALID_VALUE;  // as the driver: the allocation's start
  std::uint32_t id = g_arena.granule_region[(base - g_arena.base) / kGranule].load();
  const Region& reg = g_regions[id];
  MutexLock ipc_lock(g_ipc.mu);
  int& fd = g_ipc.exported_fds[id];
  if (!fd) {
    if (CUresult r = real_driver()->cuMemExportToShareableHandle(
            &fd, reg.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)) {
      g_ipc.exported_fds.erase(id);
      return r;
    }
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) return CUDA_ERROR_OPERATING_SYSTEM;
  add_share_key(g_ipc.export_keys[id], share_key_of_fd(fd));
  mark_region_shared(id);
  if (reg.kind == RegionKind::slab) shared_range_add(base, base + size);
  Token t{};
  std::memcpy(t.magic, kMagic, sizeof kMagic);
  t.pid = static_cast<std::uint32_t>(getpid());
  t.fd = fd;
  t.region_address = reg.address;
  t.region_size = reg.size;
  t.offset = base - reg.address;
  t.size = size;
  t.inode = static_cast<std::uint64_t>(st.st_ino);
  std::memset(handle->reserved, 0, sizeof handle->reserved);
  std::memcpy(handle->reserved, &t, sizeof t);
  return CUDA_SUCCESS;
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
  {
    MutexLock region_lock(g_region_mu);
    MutexLock lock(g_ipc.mu);
    if (std::optional<CUresult> r = close_opened(ptr)) return *r;
  }
  return real(ptr);  // a driver's own mapping
}

}  // extern "C"
}  // namespace gcr::interpose
