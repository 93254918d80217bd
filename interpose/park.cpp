// The region manager's side of the control channel (interpose/agent_ops.h): quiesce and
// resume, park and unpark, checkpoint epochs and status. Note [Park before lock] says when each
// may run.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "agent_ops.h"
#include "alloc.h"
#include "config.h"
#include "gate.h"
#include "pinned.h"
#include "real_driver.h"
#include "regions.h"
#include "vmm_handles.h"

namespace gcr::interpose {
namespace {

ProcessState g_state = ProcessState::running;
std::string g_last_checkpoint;

// Note [Kept exports]: fds of the program's that hold an exported allocation (PyTorch keeps the fd
// of a shared segment open; a peer takes it with pidfd_getfd later). Found at park, made to name
// the allocation's memory again at unpark, at the same fd numbers: a kept fd would otherwise name
// the memory of before a restore (CRIU restores it as a copy).
struct KeptExport {
  int fd;
  std::uint32_t allocation;
};
std::vector<KeptExport> g_kept_exports;

std::vector<KeptExport> find_kept_exports(const std::vector<ParkedRegion>& parked)
    GCR_REQUIRES(g_region_mu) {
  std::map<std::uint64_t, std::uint32_t> by_key;
  for (std::uint32_t id : live_region_ids()) {
    const Region& reg = g_regions[id];
    if (!reg.allocation) continue;
    const VirtualAllocation* v = valloc_by_id(reg.allocation);
    if (v && v->exported)
      for (std::uint64_t k : v->share_keys) by_key[k] = reg.allocation;
  }
  std::vector<KeptExport> out;
  if (by_key.empty()) return out;
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return out;
  while (dirent* e = ::readdir(dir)) {
    int fd = std::atoi(e->d_name);
    if (fd <= 2 || fd == ::dirfd(dir)) continue;
    bool ours = false;  // the park's own exports, on their way to gcrd
    for (const ParkedRegion& p : parked) ours = ours || p.fd.get() == fd;
    if (ours) continue;
    if (auto it = by_key.find(share_key_of_fd(fd)); it != by_key.end())
      out.push_back({fd, it->second});
  }
  ::closedir(dir);
  return out;
}

// Re-exports each kept fd's allocation onto the same fd number (its close-on-exec flag kept).
void refresh_kept_exports() GCR_REQUIRES(g_region_mu) {
  const RealDriver* real = real_driver();
  for (const KeptExport& k : g_kept_exports) {
    VirtualAllocation* v = valloc_by_id(k.allocation);
    if (!v || !v->real) continue;
    int fresh = -1;
    if (real->cuMemExportToShareableHandle(&fresh, v->real,
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) != 0)
      continue;
    int flags = ::fcntl(k.fd, F_GETFD);
    if (::dup3(fresh, k.fd, flags > 0 && (flags & FD_CLOEXEC) ? O_CLOEXEC : 0) >= 0)
      add_share_key(v->share_keys, share_key_of_fd(k.fd));
    ::close(fresh);
  }
  g_kept_exports.clear();
}

Error call_error(const char* what, CUresult r, std::uint64_t address = 0) {
  const char* name = "unknown";
  if (const RealDriver* real = real_driver()) {
    real->cuGetErrorName(r, &name);
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s failed with %s (%d)", what, name ? name : "?",
                static_cast<int>(r));
  std::string msg = buf;
  if (address) {
    std::snprintf(buf, sizeof buf, " for region 0x%llx", static_cast<unsigned long long>(address));
    msg += buf;
  }
  return Error{Errc::driver, msg};
}

std::vector<std::string> blockers_locked() GCR_REQUIRES(g_region_mu) {
  std::vector<std::string> out = valloc_blockers();
  for (std::string& why : ipc_blockers()) out.push_back(std::move(why));
  return out;
}

Status synchronize_contexts(const std::vector<CUcontext>& contexts) {
  const RealDriver* real = real_driver();
  for (CUcontext ctx : contexts) {
    if (CUresult r = real->cuCtxPushCurrent_v2(ctx)) return call_error("cuCtxPushCurrent", r);
    CUresult r = real->cuCtxSynchronize();
    CUcontext popped;
    real->cuCtxPopCurrent_v2(&popped);
    if (r != CUDA_SUCCESS) return call_error("cuCtxSynchronize", r);
  }
  return ok();
}

// Drains every context within `timeout_ms` (0: however long it takes). A stream may wait on what
// no issued launch will do (a value only a stopped peer, or a later host call, writes): then the
// synchronize goes on on a thread of its own, and the quiesce fails in time, the gate opens, and
// the process runs on (and the drain's thread ends when the stream does).
Status drain_all(unsigned timeout_ms) {
  std::vector<CUcontext> contexts = known_contexts();
  if (timeout_ms == 0) return synchronize_contexts(contexts);
  struct Drain {
    RankedMutex mu{LockRank::drain};
    std::condition_variable_any cv;
    bool done = false;
    Status result = ok();
  };
  auto drain = std::make_shared<Drain>();
  try {
    std::thread([drain, contexts = std::move(contexts)] {
      Status s = synchronize_contexts(contexts);
      MutexLock lock(drain->mu);
      drain->result = std::move(s);
      drain->done = true;
      drain->cv.notify_all();
    }).detach();
  } catch (const std::system_error&) {
    return Error{Errc::internal, "cannot start a thread to drain the process's streams"};
  }
  std::unique_lock lock(drain->mu);
  if (!drain->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return drain->done; }))
    return Error{Errc::timeout, "the GPU work of the process did not finish within " +
                                    std::to_string(timeout_ms) +
                                    " ms (a stream may wait on a value no issued launch writes); "
                                    "retry with a longer timeout"};
  return drain->result;
}

}  // namespace

Status op_quiesce(unsigned timeout_ms) {
  if (g_state != ProcessState::running) return ok();  // already quiet
  if (!real_driver()) return Error{Errc::driver, gcr::interpose::driver_error()};
  const auto start = std::chrono::steady_clock::now();
  if (!gate_close(timeout_ms))
    return Error{Errc::timeout, "CUDA calls of the process did not finish within " +
                                    std::to_string(timeout_ms) +
                                    " ms; retry with a longer timeout"};
  unsigned left = 0;  // what the drain may take of the timeout (0: no limit)
  if (timeout_ms) {
    auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::steady_clock::now() - start)
                     .count();
    left = static_cast<unsigned>(std::max<long long>(1, timeout_ms - spent));
  }
  if (Status s = drain_all(left); !s) {
    gate_open();
    return s;
  }
  MutexLock lock(g_region_mu);
  reap_async_frees(true);  // every stream is drained: their frees are done
  g_state = ProcessState::quiesced;
  return ok();
}

Status op_resume() {
  if (g_state == ProcessState::parked)
    return Error{Errc::invalid_argument, "the process is parked: unpark it before resuming"};
  if (g_state == ProcessState::quiesced) gate_open();
  g_state = ProcessState::running;
  return ok();
}

namespace {

std::string hex_address(std::uint64_t address) {
  char b[32];
  std::snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(address));
  return b;
}

// Why the process cannot be parked now, or ok (caller holds g_region_mu).
Status check_parkable_locked() GCR_REQUIRES(g_region_mu) {
  std::vector<std::string> why = blockers_locked();
  if (why.empty()) return ok();
  std::string msg = "the process cannot be checkpointed now: " + why[0];
  for (std::size_t i = 1; i < why.size(); ++i) msg += "; " + why[i];
  return Error{Errc::unsupported, msg};
}

// Allocations the program has mapped nowhere get an arena address, so that they park as regions.
Status hold_unmapped_allocations() GCR_REQUIRES(g_region_mu) {
  for (std::uint32_t allocation : valloc_unmapped()) {
    const VirtualAllocation* v = valloc_by_id(allocation);
    auto device = static_cast<std::uint32_t>(v->prop.location.id);
    if (!register_held_region(v->size, device, allocation))
      return Error{Errc::out_of_memory, "no arena address left to park an unmapped allocation of " +
                                            std::to_string(v->size) +
                                            " bytes; set GCR_ARENA_BYTES higher"};
  }
  return ok();
}

// A region's memory as an fd. A user region's handle is retained into `user_handles`.
Result<ParkedRegion> export_region(
    const RealDriver* real, std::uint32_t id, Region& reg, std::uint64_t epoch,
    std::map<std::uint32_t, CUmemGenericAllocationHandle>& user_handles) GCR_REQUIRES(g_region_mu) {
  CUmemGenericAllocationHandle h = reg.handle;
  if (reg.allocation) {
    const VirtualAllocation* v = valloc_by_id(reg.allocation);
    h = v ? v->real : 0;  // Note [Virtual allocation handles]: gcr's reference, the only one
  } else if (reg.kind == RegionKind::user) {
    if (CUresult r = real->cuMemRetainAllocationHandle(&h, reinterpret_cast<void*>(reg.address)))
      return call_error("cuMemRetainAllocationHandle", r, reg.address);
    user_handles[id] = h;
  }
  int fd = -1;
  if (CUresult r =
          real->cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0))
    return call_error("cuMemExportToShareableHandle", r, reg.address);
  ParkedRegion p;
  p.region =
      RegionRecord{reg.address, reg.size, reg.device, region_dirty(reg, epoch) ? kRegionDirty : 0u};
  p.fd = UniqueFd(fd);
  return p;
}

// Lets go of an exported region's memory: its fd holds it now.
void release_region(const RealDriver* real, std::uint32_t id, Region& reg,
                    std::map<std::uint32_t, CUmemGenericAllocationHandle>& user_handles)
    GCR_REQUIRES(g_region_mu) {
  if (reg.kind == RegionKind::held) {
    // mapped nowhere: only the handle holds it
  } else if (CUresult r = real->cuMemUnmap(reg.address, reg.size)) {
    std::fprintf(stderr, "gcr: park: cuMemUnmap of region 0x%llx failed (%d)\n",
                 static_cast<unsigned long long>(reg.address), static_cast<int>(r));
  }
  if (reg.allocation) {
    if (VirtualAllocation* v = valloc_by_id(reg.allocation); v && v->real) {
      real->cuMemRelease(v->real);  // now the driver holds none of it: the fd does
      v->real = 0;
    }
  } else if (reg.kind == RegionKind::user) {
    real->cuMemRelease(user_handles[id]);
  } else if (reg.handle) {
    real->cuMemRelease(reg.handle);
    reg.handle = 0;
  }
  reg.parked = true;
}

}  // namespace

Result<std::vector<ParkedRegion>> op_park() {
  if (g_state != ProcessState::quiesced)
    return Error{Errc::invalid_argument, "park needs a quiesced process (send quiesce first)"};
  const RealDriver* real = real_driver();
  MutexLock lock(g_region_mu);
  GCR_TRY(check_parkable_locked());
  std::vector<ParkedRegion> out;
  std::map<std::uint32_t, CUmemGenericAllocationHandle> user_handles;
  auto undo = [&]() GCR_REQUIRES(g_region_mu) {
    for (auto& [id, h] : user_handles) real->cuMemRelease(h);
    out.clear();  // closes the exported fds
    drop_held_regions();
    unpark_host_memory();
  };
  if (Status held = hold_unmapped_allocations(); !held) {
    undo();
    return std::move(held).error();
  }
  park_host_memory();
  std::uint64_t epoch = g_epoch.load();
  // First export everything: a failure here leaves the process exactly as it was.
  for (std::uint32_t id : live_region_ids()) {
    auto parked = export_region(real, id, g_regions[id], epoch, user_handles);
    if (!parked) {
      undo();
      return std::move(parked).error();
    }
    out.push_back(std::move(parked).value());
  }
  // Then let go of the memory: the fds now hold it.
  for (std::uint32_t id : live_region_ids()) release_region(real, id, g_regions[id], user_handles);
  ipc_close_exports();  // they hold the memory too (and CRIU would dump a memfd's bytes)
  // Only now: before the release, the driver's own fds may name the same files.
  g_kept_exports = find_kept_exports(out);
  g_state = ProcessState::parked;
  if (config().log) std::fprintf(stderr, "gcr: parked %zu regions\n", out.size());
  return out;
}

namespace {

// Imports a parked region's fd and maps it back where it was (a held region is mapped nowhere).
Status import_region(const RealDriver* real, std::uint32_t id, Region& reg, const ParkedRegion& p,
                     std::map<std::uint32_t, CUmemGenericAllocationHandle>& handles,
                     std::vector<std::uint32_t>& mapped) GCR_REQUIRES(g_region_mu) {
  CUmemGenericAllocationHandle h = 0;
  void* os_handle = reinterpret_cast<void*>(static_cast<std::intptr_t>(p.fd.get()));
  if (CUresult r = real->cuMemImportFromShareableHandle(&h, os_handle,
                                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
    return call_error("cuMemImportFromShareableHandle", r, reg.address);
  handles[id] = h;
  CUmemAllocationProp prop{};
  int device = static_cast<int>(reg.device);
  if (real->cuMemGetAllocationPropertiesFromHandle(&prop, h) == CUDA_SUCCESS)
    device = prop.location.id;
  if (reg.kind == RegionKind::held) return ok();  // the program had it mapped nowhere
  if (CUresult r = real->cuMemMap(reg.address, reg.size, reg.phys_offset, h, 0))
    return call_error("cuMemMap", r, reg.address);
  mapped.push_back(id);
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (CUresult r = real->cuMemSetAccess(reg.address, reg.size, &access, 1))
    return call_error("cuMemSetAccess", r, reg.address);
  return ok();
}

// The region holds its memory through `handle` again (imported from `fd`).
void adopt_handle(const RealDriver* real, std::uint32_t id, Region& reg,
                  CUmemGenericAllocationHandle handle, int fd) GCR_REQUIRES(g_region_mu) {
  // Note [Shared regions]: every view of a shared allocation is given the same fd back.
  const std::uint64_t key = share_key_of_fd(fd);
  if (reg.allocation) {
    if (VirtualAllocation* v = valloc_by_id(reg.allocation)) {
      v->real = handle;
      if (v->exported || v->origin == AllocationOrigin::imported) v->share_keys = {key};
    }
  } else if (reg.kind == RegionKind::user) {
    real->cuMemRelease(handle);  // the mapping keeps the memory alive
  } else {
    reg.handle = handle;
    ipc_set_export_key(id, key);  // a region exported through cuIpcGetMemHandle only
  }
  CUmemAllocationProp prop{};
  if (real->cuMemGetAllocationPropertiesFromHandle(&prop, handle) == CUDA_SUCCESS)
    reg.device = static_cast<std::uint32_t>(prop.location.id);
  reg.parked = false;
}

}  // namespace

Status op_unpark(std::vector<ParkedRegion> regions) {
  if (g_state != ProcessState::parked)
    return Error{Errc::invalid_argument, "unpark needs a parked process"};
  const RealDriver* real = real_driver();
  MutexLock lock(g_region_mu);
  std::map<std::uint64_t, ParkedRegion*> given;
  for (ParkedRegion& p : regions) given[p.region.address] = &p;
  std::vector<std::uint32_t> ids = live_region_ids();
  for (std::uint32_t id : ids) {
    const Region& reg = g_regions[id];
    auto it = given.find(reg.address);
    if (it == given.end() || it->second->region.size != reg.size)
      return Error{Errc::invalid_argument,
                   "unpark: region 0x" + hex_address(reg.address) +
                       " is missing or has another size; every parked region must come back"};
  }
  unpark_host_memory();
  std::vector<std::uint32_t> mapped;
  std::map<std::uint32_t, CUmemGenericAllocationHandle> handles;
  for (std::uint32_t id : ids) {
    Region& reg = g_regions[id];
    if (Status s = import_region(real, id, reg, *given[reg.address], handles, mapped); !s) {
      for (std::uint32_t m : mapped) real->cuMemUnmap(g_regions[m].address, g_regions[m].size);
      for (auto& [hid, h] : handles) real->cuMemRelease(h);
      park_host_memory();
      return s;
    }
  }
  for (std::uint32_t id : ids) {
    Region& reg = g_regions[id];
    adopt_handle(real, id, reg, handles[id], given[reg.address]->fd.get());
  }
  drop_held_regions();  // their allocations are held by their handles again
  refresh_kept_exports();
  ipc_reopen_exports();
  pinned_check_incarnation();  // Note [Device writes to pinned host memory]
  g_state = ProcessState::quiesced;
  return ok();
}

std::vector<ShareRecord> op_shares() {
  MutexLock lock(g_region_mu);
  std::vector<ShareRecord> out;
  for (std::uint32_t id : live_region_ids()) {
    const Region& reg = g_regions[id];
    if (reg.allocation) {
      const VirtualAllocation* v = valloc_by_id(reg.allocation);
      if (!v || !(v->exported || v->origin == AllocationOrigin::imported)) continue;
      std::uint32_t flags =
          (v->exported ? control::kShareExported : 0u) |
          (v->origin == AllocationOrigin::imported ? control::kShareImported : 0u);
      out.push_back({reg.address, flags, v->share_keys});
    } else if (std::vector<std::uint64_t> keys = ipc_export_keys(id); !keys.empty()) {
      out.push_back({reg.address, control::kShareExported, std::move(keys)});
    }
  }
  return out;
}

std::vector<std::string> op_blockers() {
  MutexLock lock(g_region_mu);
  return blockers_locked();
}

Status op_new_epoch(const std::string& checkpoint_id) {
  g_epoch.fetch_add(1);
  pinned_arm();  // Note [Device writes to pinned host memory]: the cut protects host memory anew
  g_touch_count.store(0);  // Note [First-touch order]: from this cut on
  g_all_dirty.store(false);
  g_last_checkpoint = checkpoint_id;
  return ok();
}

std::vector<std::uint64_t> op_touch_order() {
  MutexLock lock(g_region_mu);
  std::vector<std::uint64_t> out;
  std::uint32_t n = std::min(g_touch_count.load(), kTouchLog);
  std::vector<bool> seen(kMaxRegions, false);
  for (std::uint32_t i = 0; i < n; ++i) {
    std::uint32_t id = g_touch_log[i].load();
    if (!id || id >= kMaxRegions || seen[id] || g_regions[id].kind == RegionKind::free) continue;
    seen[id] = true;
    out.push_back(g_regions[id].address);
  }
  return out;
}

std::vector<RegionRecord> op_regions() {
  MutexLock lock(g_region_mu);
  std::vector<RegionRecord> out;
  std::uint64_t epoch = g_epoch.load();
  for (std::uint32_t id : live_region_ids()) {
    const Region& reg = g_regions[id];
    out.push_back(
        {reg.address, reg.size, reg.device, region_dirty(reg, epoch) ? kRegionDirty : 0u});
  }
  return out;
}

StatusInfo op_status() {
  StatusInfo s;
  s.state = g_state;
  s.epoch = g_epoch.load();
  s.last_checkpoint = g_last_checkpoint;
  s.conservative = config().track == TrackMode::conservative;
  s.host_registered = g_host_registered.load(std::memory_order_relaxed);
  for (const RegionRecord& r : op_regions()) {
    ++s.regions;
    s.region_bytes += r.size;
    if (r.flags & kRegionDirty) s.dirty_bytes += r.size;
  }
  MutexLock lock(g_region_mu);
  s.requested_bytes = requested_bytes();
  return s;
}

}  // namespace gcr::interpose
