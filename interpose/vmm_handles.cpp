// The table of Note [Virtual allocation handles] and what it says against a checkpoint.
#include "vmm_handles.h"

#include <sys/stat.h>

#include <cstdio>
#include <map>
#include <mutex>

#include "gcr/control.h"
#include "real_driver.h"
#include "regions.h"

namespace gcr::interpose {
namespace {

std::map<std::uint32_t, VirtualAllocation> g_allocations GCR_GUARDED_BY(g_region_mu);
std::uint32_t g_next_allocation GCR_GUARDED_BY(g_region_mu) =
    1;  // never reused: a stale handle stays invalid

std::string hex(std::uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

std::string mib(std::uint64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return b;
}

}  // namespace

CUmemGenericAllocationHandle valloc_add(CUmemGenericAllocationHandle real, std::uint64_t size,
                                        const CUmemAllocationProp& prop, AllocationOrigin origin) {
  std::uint32_t id = g_next_allocation++;
  VirtualAllocation& v = g_allocations[id];
  v.real = real;
  v.prop = prop;
  v.size = size;
  v.program_refs = 1;
  v.origin = origin;
  return valloc_handle(id);
}

std::uint32_t valloc_id(CUmemGenericAllocationHandle handle) {
  return is_virtual_handle(handle) ? static_cast<std::uint32_t>(handle & 0xffff'ffffu) : 0;
}

CUmemGenericAllocationHandle valloc_handle(std::uint32_t id) {
  return kVirtualHandleTag | id;
}

VirtualAllocation* valloc_by_id(std::uint32_t id) {
  auto it = g_allocations.find(id);
  return it == g_allocations.end() ? nullptr : &it->second;
}

VirtualAllocation* valloc_find(CUmemGenericAllocationHandle handle) {
  std::uint32_t id = valloc_id(handle);
  return id ? valloc_by_id(id) : nullptr;
}

void valloc_release_if_unused(std::uint32_t id) {
  auto it = g_allocations.find(id);
  if (it == g_allocations.end() || it->second.program_refs || it->second.mappings) return;
  if (it->second.real) real_driver()->cuMemRelease(it->second.real);
  g_allocations.erase(it);
}

std::vector<std::uint32_t> valloc_unmapped() {
  std::vector<std::uint32_t> out;
  for (const auto& [id, v] : g_allocations)
    if (!v.mappings && v.program_refs && v.real) out.push_back(id);
  return out;
}

std::uint64_t share_key_of_fd(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return 0;
  return control::share_key(st.st_dev, st.st_ino);
}

void add_share_key(std::vector<std::uint64_t>& keys, std::uint64_t key) {
  if (!key) return;
  for (std::uint64_t k : keys)
    if (k == key) return;
  keys.push_back(key);
  if (keys.size() > control::kMaxShareKeys) keys.erase(keys.begin());
}

void valloc_mark_shared(std::uint32_t id) {
  for (std::uint32_t r : live_region_ids())
    if (g_regions[r].allocation == id) mark_region_shared(r);
}

std::vector<std::string> valloc_blockers() {
  std::map<std::uint32_t, std::vector<std::uint64_t>> mapped_at;
  for (std::uint32_t id : live_region_ids()) {
    const Region& reg = g_regions[id];
    if (reg.kind == RegionKind::user && reg.allocation)
      mapped_at[reg.allocation].push_back(reg.address);
  }
  std::vector<std::string> out;
  for (const auto& [id, v] : g_allocations) {
    const auto& at = mapped_at[id];
    if (at.empty() && (v.exported || v.origin == AllocationOrigin::imported))
      out.push_back("an allocation of " + mib(v.size) +
                    " shared with another process is held but mapped nowhere; gcr restores "
                    "shared memory at the addresses that map it, so it refuses");
    if (at.size() > 1) {
      std::string list;
      for (std::uint64_t a : at) list += (list.empty() ? "" : ", ") + hex(a);
      out.push_back("one allocation of " + mib(v.size) + " is mapped at " +
                    std::to_string(at.size()) + " addresses (" + list +
                    "); gcr would restore each mapping as memory of its own, so it refuses");
    }
  }
  return out;
}

}  // namespace gcr::interpose
