// GCR_TRACK=validate: see Note [Validating write tracking] in validate.h.
#include "validate.h"

#include <cxxabi.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <optional>
#include <unordered_set>

#include "real_driver.h"
#include "regions.h"

namespace gcr::interpose {
namespace {

struct Profile {
  RankedMutex mu{LockRank::validation};
  std::string path;
  std::unordered_set<std::string> kernels;
};

Profile& profile() {
  static Profile* p = [] {
    auto* made = new Profile;  // immortal: used from any thread until exit
    if (const char* path = std::getenv("GCR_TRACK_PROFILE"); path && *path) {
      made->path = path;
      std::ifstream in(made->path);
      for (std::string line; std::getline(in, line);) {
        if (!line.empty() && line[0] != '#') made->kernels.insert(line);
      }
    }
    return made;
  }();
  return *p;
}

// Appends a kernel to the profile file (once per name).
void record(const std::string& kernel) {
  Profile& p = profile();
  MutexLock lock(p.mu);
  if (!p.kernels.insert(kernel).second || p.path.empty()) return;
  int fd = ::open(p.path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::fprintf(stderr, "gcr: --track validate: cannot write the profile '%s'\n", p.path.c_str());
    return;
  }
  std::string line = kernel + "\n";
  (void)!::write(fd, line.data(), line.size());
  ::close(fd);
}

bool sync_context() {
  const RealDriver* real = real_driver();
  return real && real->cuCtxSynchronize && real->cuCtxSynchronize() == CUDA_SUCCESS;
}

// XXH3-128 of a region's bytes as the device holds them; nullopt when it cannot be read.
std::optional<store::ChunkId> hash_region(std::uint64_t address, std::uint64_t size) {
  static const auto copy = real_fn<decltype(&::cuMemcpyDtoH_v2)>("cuMemcpyDtoH_v2");
  static thread_local std::vector<std::byte> buffer;
  buffer.resize(size);
  if (copy(buffer.data(), address, size) != CUDA_SUCCESS) return std::nullopt;
  return store::chunk_id_of(buffer);
}

// Once per (kernel, region) in a process: a kernel in a loop would say it every launch.
bool first_report(const std::string& kernel, std::uint64_t address) {
  static RankedMutex mu{LockRank::validation};
  static auto* seen = new std::unordered_set<std::string>;  // immortal
  MutexLock lock(mu);
  return seen->insert(kernel + "@" + std::to_string(address)).second;
}

std::string readable(const std::string& kernel) {
  int status = 0;
  char* d = abi::__cxa_demangle(kernel.c_str(), nullptr, nullptr, &status);
  if (status != 0 || d == nullptr) return kernel;
  std::string out = std::string(d) + " (" + kernel + ")";
  std::free(d);
  return out;
}

}  // namespace

bool profiled_as_writing_all(const std::string& kernel_name) {
  Profile& p = profile();
  MutexLock lock(p.mu);
  return p.kernels.contains(kernel_name);
}

LaunchValidation::LaunchValidation(CUfunction f, void** params, void** extra) {
  LaunchWrites w = launch_writes(f, params, extra);
  if (!w.known || !sync_context()) return;  // marked as writing everything: nothing to check
  kernel_ = w.kernel.empty() ? "(unnamed kernel)" : w.kernel;
  std::vector<std::pair<std::uint32_t, std::pair<std::uint64_t, std::uint64_t>>> regions;
  {
    MutexLock lock(g_region_mu);
    for (std::uint32_t id : live_region_ids()) {
      const Region& r = g_regions[id];
      if (r.parked || r.kind == RegionKind::held) continue;
      if (std::find(w.regions.begin(), w.regions.end(), id) != w.regions.end()) continue;
      regions.push_back({id, {r.address, r.size}});
    }
  }
  for (const auto& [id, span] : regions) {
    if (auto h = hash_region(span.first, span.second)) {
      entries_.push_back({id, span.first, span.second, *h});
    }
  }
}

void LaunchValidation::after(CUresult launched) {
  if (entries_.empty() || launched != CUDA_SUCCESS || !sync_context()) return;
  for (const Entry& e : entries_) {
    auto h = hash_region(e.address, e.size);
    if (!h || *h == e.hash) continue;
    mark_range_written(e.address, e.size);
    record(kernel_);
    if (!first_report(kernel_, e.address)) continue;
    std::fprintf(
        stderr,
        "gcr: --track validate: kernel %s wrote region 0x%llx (%llu bytes), which its "
        "parameters do not name as written (a device pointer stored in device memory?)%s\n",
        readable(kernel_).c_str(), static_cast<unsigned long long>(e.address),
        static_cast<unsigned long long>(e.size),
        profile().path.empty()
            ? "; give --track-profile FILE to record it for later runs"
            : "; recorded in the profile: runs given it count this kernel as writing "
              "every region");
  }
}

}  // namespace gcr::interpose
