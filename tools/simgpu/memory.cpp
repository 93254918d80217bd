// The device address space and the memory model of Note [Device memory] (simgpu.h): the
// reservations, the cuMemAlloc heap, range lookup, and the driver checkpoint of memory.
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "simgpu.h"

namespace gcr::simgpu {

VaSpace g_va;
MemoryState g_mem;

namespace {

constexpr std::uint64_t round_up(std::uint64_t v, std::uint64_t a) {
  return (v + a - 1) / a * a;
}

// Where the device address space is placed when that range is free: device pointers then look
// the same in every run and every process, which makes logs and images easier to read.
constexpr std::uintptr_t kPreferredBase = 0x200000000000ull;

void* reserve(std::uintptr_t hint, std::uint64_t size) {
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  void* p = MAP_FAILED;
  if (hint)
    p = mmap(reinterpret_cast<void*>(hint), size, PROT_NONE, flags | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == MAP_FAILED) p = mmap(nullptr, size, PROT_NONE, flags, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// Host memory for checkpointed device bytes: anonymous, untouched until written.
struct HostCopy {
  std::byte* data = nullptr;
  std::uint64_t size = 0;
};
std::vector<std::pair<DevAddr, HostCopy>> g_saved_heap;  // per heap allocation

HostCopy host_copy(std::uint64_t size) {
  HostCopy c;
  c.size = size;
  if (size) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    c.data = p == MAP_FAILED ? nullptr : static_cast<std::byte*>(p);
  }
  return c;
}
void free_copy(HostCopy& c) {
  if (c.data) munmap(c.data, c.size);
  c = {};
}

bool g_checkpointed = false;

// Takes [addr, addr+size) out of a free-range map, first fit with alignment, or at `want`.
bool take_range(std::map<DevAddr, std::uint64_t>& free, std::uint64_t size, std::uint64_t align,
                DevAddr want, DevAddr* out) {
  auto carve = [&](std::map<DevAddr, std::uint64_t>::iterator it, DevAddr start) {
    DevAddr r_start = it->first;
    std::uint64_t r_size = it->second;
    free.erase(it);
    if (start > r_start) free[r_start] = start - r_start;
    DevAddr end = start + size, r_end = r_start + r_size;
    if (end < r_end) free[end] = r_end - end;
    *out = start;
  };
  if (want) {
    auto it = free.upper_bound(want);
    if (it != free.begin()) {
      --it;
      if (want % align == 0 && want >= it->first && want + size <= it->first + it->second) {
        carve(it, want);
        return true;
      }
    }
  }
  for (auto it = free.begin(); it != free.end(); ++it) {
    DevAddr start = round_up(it->first, align);
    if (start + size <= it->first + it->second) {
      carve(it, start);
      return true;
    }
  }
  return false;
}

void give_range(std::map<DevAddr, std::uint64_t>& free, DevAddr addr, std::uint64_t size) {
  auto [it, inserted] = free.emplace(addr, size);
  if (!inserted) return;
  auto next = std::next(it);
  if (next != free.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free.erase(next);
  }
  if (it != free.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free.erase(it);
    }
  }
}

}  // namespace

// Note [Device pages]
// A GPU maps its memory in 2 MiB pages: unmapping gigabytes (a park) or filling fresh memory is
// little work per byte. simgpu's memory is shared memory, in 2 MiB pages where the host allows
// transparent huge pages for it (transparent_hugepage/shmem_enabled within_size, always or
// force), else in 4 KiB pages, whose per-page work in the host kernel would show in gcr's numbers
// as if it were a GPU's (docs/simgpu.md). The mappings are not MADV_HUGEPAGE: that would let a
// fault compact memory for a huge page (transparent_hugepage/defrag "madvise", the default), a
// stall of the host's that a GPU does not have; unmarked, a huge page is taken when one is free.
//
// Every mapping of the alias is MADV_DONTFORK (Note [Shared device memory]); a new mapping made
// over part of the alias is a new VMA, which does not inherit that, so each one is marked.
// Returns [addr, addr + size) of the alias to PROT_NONE, dropping whatever was mapped there.
void unmap_alias(DevAddr addr, std::uint64_t size) {
  void* p = mmap(alias(addr), size, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  if (p != MAP_FAILED) madvise(p, size, MADV_DONTFORK);
}

bool map_alias(DevAddr addr, std::uint64_t size, int fd, std::uint64_t offset, int prot) {
  void* p = mmap(alias(addr), size, prot, MAP_SHARED | MAP_FIXED, fd, static_cast<off_t>(offset));
  if (p == MAP_FAILED) return false;
  madvise(p, size, MADV_DONTFORK);
  return true;
}

bool file_writes_unlimited() {
  rlimit r{};
  return getrlimit(RLIMIT_FSIZE, &r) == 0 && r.rlim_cur == RLIM_INFINITY;
}

bool write_file(int fd, std::uint64_t offset, const std::byte* src, std::uint64_t n) {
  // pwrite moves at most 0x7ffff000 bytes a call.
  for (std::uint64_t done = 0; done < n;) {
    ssize_t w = pwrite(fd, src + done, n - done, static_cast<off_t>(offset + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    done += static_cast<std::uint64_t>(w);
  }
  return true;
}

UniqueFd make_memfd(const char* name, std::uint64_t size) {
  UniqueFd fd(memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (fd && ftruncate(fd.get(), static_cast<off_t>(size)) != 0) fd.reset();
  return fd;
}

bool seal_size(int fd) {
  return fcntl(fd, F_ADD_SEALS, kSizeSeals) == 0;
}

int prot_of(unsigned access) {
  if (access == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return PROT_READ | PROT_WRITE;
  if (access == CU_MEM_ACCESS_FLAGS_PROT_READ) return PROT_READ;
  return PROT_NONE;
}

bool take_va(std::uint64_t size, std::uint64_t align, DevAddr want, DevAddr* out) {
  return take_range(g_mem.vmm_free, size, align, want, out);
}
void give_va(DevAddr addr, std::uint64_t size) {
  give_range(g_mem.vmm_free, addr, size);
}

CUresult init_memory() {
  const Config& c = config();
  std::uint64_t total = static_cast<std::uint64_t>(c.device_count) * c.memory_bytes;
  g_va.heap_size = round_up(total, kGranularity);
  g_va.vmm_size = std::max<std::uint64_t>(4 * total, 64ull << 30);
  g_va.size = g_va.heap_size + g_va.vmm_size;
  void* base = reserve(kPreferredBase, g_va.size);
  void* alias_base = reserve(kPreferredBase + 2 * round_up(g_va.size, 1ull << 40), g_va.size);
  if (!base || !alias_base) {
    log_once("va", "cannot reserve the device address space (" + std::to_string(g_va.size >> 30) +
                       " GiB twice); lower SIMGPU_MEMORY or SIMGPU_DEVICES");
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  madvise(alias_base, g_va.size, MADV_DONTFORK);
  g_va.base = reinterpret_cast<DevAddr>(base);
  g_va.delta = reinterpret_cast<std::intptr_t>(alias_base) - static_cast<std::intptr_t>(g_va.base);
  g_va.heap_base = g_va.base;
  g_va.vmm_base = g_va.base + g_va.heap_size;
  g_mem.heap_fd = make_memfd("simgpu-heap", g_va.heap_size);
  if (!g_mem.heap_fd ||
      !map_alias(g_va.heap_base, g_va.heap_size, g_mem.heap_fd.get(), 0, PROT_READ | PROT_WRITE))
    return CUDA_ERROR_OUT_OF_MEMORY;
  g_mem.heap_free[g_va.heap_base] = g_va.heap_size;
  g_mem.vmm_free[g_va.vmm_base] = g_va.vmm_size;
  return CUDA_SUCCESS;
}

CUresult heap_alloc(int dev, std::uint64_t bytes, CUctx_st* ctx, CUmemPoolHandle_st* pool,
                    DevAddr* out) {
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  std::uint64_t size = round_up(bytes, kHeapAlign);
  if (CUresult r = charge_device(dev, size)) return r;
  std::lock_guard lock(g_mem.mu);
  DevAddr addr;
  if (!take_range(g_mem.heap_free, size, kHeapAlign, 0, &addr)) {
    uncharge_device(dev, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  g_mem.heap_allocs[addr] = HeapAlloc{addr, size, dev, ctx, pool, g_mem.next_id++};
  *out = addr;
  return CUDA_SUCCESS;
}

CUresult heap_free(DevAddr d) {
  std::lock_guard lock(g_mem.mu);
  auto it = g_mem.heap_allocs.find(d);
  if (it == g_mem.heap_allocs.end()) return CUDA_ERROR_INVALID_VALUE;
  HeapAlloc a = it->second;
  g_mem.heap_allocs.erase(it);
  // Give whole pages back to the host; a later allocation reads zeros there, which is one of
  // the values uninitialised device memory may hold.
  std::uint64_t page = 4096, first = round_up(a.addr, page), last = (a.addr + a.size) / page * page;
  if (last > first && !g_checkpointed)
    fallocate(g_mem.heap_fd.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
              static_cast<off_t>(first - g_va.heap_base), static_cast<off_t>(last - first));
  give_range(g_mem.heap_free, a.addr, a.size);
  uncharge_device(a.device, a.size);
  if (a.pool) a.pool->used -= a.size;
  return CUDA_SUCCESS;
}

void free_context_memory(CUctx_st* ctx) {
  std::vector<DevAddr> doomed;
  {
    std::lock_guard lock(g_mem.mu);
    for (auto& [addr, a] : g_mem.heap_allocs)
      if (a.ctx == ctx) doomed.push_back(addr);
    // IPC memory the context opened is closed with it, however many references are left.
    for (auto it = g_mem.ipc_openings.begin(); it != g_mem.ipc_openings.end();) {
      if (it->second.ctx != ctx) {
        ++it;
        continue;
      }
      auto m = g_mem.mappings.find(it->second.map_addr);
      if (m != g_mem.mappings.end()) {
        unmap_alias(m->first, m->second.size);
        g_mem.mappings.erase(m);
      }
      give_va(it->second.map_addr, it->second.map_size);
      it = g_mem.ipc_openings.erase(it);
    }
  }
  for (DevAddr d : doomed) (void)heap_free(d);
}

bool find_device_range(DevAddr d, std::uint64_t bytes, DeviceRange* out) {
  if (!in_device_space(d)) return false;
  std::lock_guard lock(g_mem.mu);
  if (d >= g_va.heap_base && d < g_va.heap_base + g_va.heap_size) {
    auto it = g_mem.heap_allocs.upper_bound(d);
    if (it == g_mem.heap_allocs.begin()) return false;
    const HeapAlloc& a = (--it)->second;
    if (d + bytes > a.addr + a.size || d + bytes < d) return false;
    *out = DeviceRange{};
    out->start = a.addr, out->size = a.size, out->device = a.device;
    out->readable = out->writable = true;
    out->heap = &a;
    return !g_checkpointed;
  }
  auto it = g_mem.mappings.upper_bound(d);
  if (it == g_mem.mappings.begin()) return false;
  --it;
  const VmmMapping& m = it->second;
  if (d >= m.addr + m.size) return false;
  bool readable = m.access & CU_MEM_ACCESS_FLAGS_PROT_READ;
  bool writable = m.access == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  // A copy may run on across adjacent mappings of one reservation, as on a GPU.
  DevAddr end = m.addr + m.size;
  for (auto next = std::next(it);
       end < d + bytes && next != g_mem.mappings.end() && next->first == end; ++next) {
    readable = readable && (next->second.access & CU_MEM_ACCESS_FLAGS_PROT_READ);
    writable = writable && next->second.access == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    end = next->first + next->second.size;
  }
  if (d + bytes > end || d + bytes < d) return false;
  *out = DeviceRange{};
  out->start = m.addr, out->size = m.size, out->device = m.phys->device;
  out->readable = readable, out->writable = writable;
  out->mapping = &m;
  if (d + bytes <= m.addr + m.size && m.phys->fd) {
    out->file = m.phys;
    out->file_offset = m.offset + (d - m.addr);
  }
  return !g_checkpointed;
}

bool is_pinned_host(const void* p, std::uint64_t bytes) {
  auto a = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard lock(g_mem.mu);
  auto it = g_mem.host_allocs.upper_bound(a);
  if (it == g_mem.host_allocs.begin()) return false;
  --it;
  return a + bytes <= it->first + it->second.first;
}

// Note [Driver checkpoint of memory]
// As the real driver does, checkpoint copies every device allocation the process still holds
// (heap allocations, and cuMemCreate/imported handles whether mapped or not) into host memory of
// the process, unmaps the device ranges and closes every memfd, so that nothing of the "GPU" is
// left for CRIU to see. Restore creates new memfds (on the devices the restore maps to), copies
// the bytes back and maps them at the same addresses with the same access.
// Memory shared with another process (IPC-opened or imported memory, or exported memory that
// another process maps) is refused with CUDA_ERROR_NOT_SUPPORTED before anything is touched, as
// drivers before 610 refuse it: a restore could only give back a private copy, which would no
// longer be shared (shared_memory.cpp).
CUresult memory_checkpoint() {
  std::lock_guard lock(g_mem.mu);
  if (g_checkpointed) return CUDA_ERROR_ILLEGAL_STATE;
  if (CUresult r = refuse_shared_memory_locked()) return r;
  for (auto& [addr, a] : g_mem.heap_allocs) {
    HostCopy c = host_copy(a.size);
    if (!c.data) return CUDA_ERROR_OUT_OF_MEMORY;
    std::memcpy(c.data, alias(addr), a.size);
    g_saved_heap.emplace_back(addr, c);
  }
  unmap_alias(g_va.heap_base, g_va.heap_size);
  g_mem.heap_fd.reset();
  auto save_phys = [](PhysAlloc& p) -> bool {
    if (!p.fd) return true;
    p.saved.resize(p.size);
    for (std::uint64_t done = 0; done < p.size;) {
      ssize_t n = pread(p.fd.get(), p.saved.data() + done, p.size - done, static_cast<off_t>(done));
      if (n <= 0) return false;
      done += static_cast<std::uint64_t>(n);
    }
    p.fd.reset();
    return true;
  };
  for (auto& [addr, m] : g_mem.mappings) unmap_alias(addr, m.size);
  for (auto& [id, p] : g_mem.phys)
    if (!save_phys(*p)) return CUDA_ERROR_OPERATING_SYSTEM;
  for (auto& p : g_mem.orphans)
    if (!save_phys(*p)) return CUDA_ERROR_OPERATING_SYSTEM;
  g_checkpointed = true;
  return CUDA_SUCCESS;
}

CUresult memory_restore() {
  std::lock_guard lock(g_mem.mu);
  if (!g_checkpointed) return CUDA_ERROR_ILLEGAL_STATE;
  // Charge the devices first: a restore that cannot fit fails before touching anything.
  std::vector<std::uint64_t> need(config().device_count, 0);
  for (auto& [addr, a] : g_mem.heap_allocs) need[a.device] += a.size;
  auto for_each_phys = [](auto&& fn) {
    for (auto& [id, p] : g_mem.phys) fn(*p);
    for (auto& p : g_mem.orphans) fn(*p);
  };
  for_each_phys([&](PhysAlloc& p) { need[p.device] += p.size; });
  for (int d = 0; d < config().device_count; ++d) device(d).used_bytes = 0;
  for (int d = 0; d < config().device_count; ++d)
    if (CUresult r = charge_device(d, need[d])) {
      for (int u = 0; u < d; ++u) uncharge_device(u, need[u]);
      return r;
    }
  g_mem.heap_fd = make_memfd("simgpu-heap", g_va.heap_size);
  if (!g_mem.heap_fd ||
      !map_alias(g_va.heap_base, g_va.heap_size, g_mem.heap_fd.get(), 0, PROT_READ | PROT_WRITE))
    return CUDA_ERROR_OUT_OF_MEMORY;
  for (auto& [addr, c] : g_saved_heap) {  // Note [Copies into device memory]
    if (!file_writes_unlimited() ||
        !write_file(g_mem.heap_fd.get(), addr - g_va.heap_base, c.data, c.size))
      std::memcpy(alias(addr), c.data, c.size);
    free_copy(c);
  }
  g_saved_heap.clear();
  bool ok = true;
  for_each_phys([&](PhysAlloc& p) {
    p.fd = make_memfd(("simgpu-dev" + std::to_string(physical_device(p.device))).c_str(), p.size);
    if (p.fd && !seal_size(p.fd.get())) p.fd.reset();
    if (!p.fd || !write_file(p.fd.get(), 0, p.saved.data(), p.size)) ok = false;
    std::vector<std::byte>().swap(p.saved);
  });
  for (auto& [addr, m] : g_mem.mappings)
    if (!map_alias(addr, m.size, m.phys->fd.get(), m.offset, prot_of(m.access))) ok = false;
  g_checkpointed = false;
  return ok ? CUDA_SUCCESS : CUDA_ERROR_OPERATING_SYSTEM;
}

}  // namespace gcr::simgpu
