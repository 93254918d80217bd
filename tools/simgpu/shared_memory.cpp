// Memory shared with other processes (Note [Shared device memory] in simgpu.h): opening another
// process's memfd by handle, and the driver checkpoint's question "is any of this process's
// device memory shared?".
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>

#include "simgpu.h"

namespace gcr::simgpu {

std::uint64_t inode_of(int fd) {
  struct stat st {};
  return fstat(fd, &st) == 0 ? static_cast<std::uint64_t>(st.st_ino) : 0;
}

CUresult open_peer_fd(int pid, int fd, std::uint64_t inode, UniqueFd* out) {
  if (pid <= 0 || fd < 0 || inode == 0) return CUDA_ERROR_INVALID_HANDLE;
  std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  UniqueFd opened(open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!opened)
    return errno == EACCES || errno == EPERM ? CUDA_ERROR_MAP_FAILED : CUDA_ERROR_INVALID_HANDLE;
  if (inode_of(opened.get()) != inode) return CUDA_ERROR_INVALID_HANDLE;
  *out = std::move(opened);
  return CUDA_SUCCESS;
}

namespace {

// A file range of this process's memory that another process may map: [begin, end) of inode.
struct Shared {
  std::uint64_t inode, begin, end;
  const char* what;
};

// Does another process map any of `ranges`? Reads every /proc/<pid>/maps it may read: a line is
// "start-end perms offset dev inode path".
const Shared* mapped_elsewhere(const std::vector<Shared>& ranges, int* who) {
  if (ranges.empty()) return nullptr;
  DIR* proc = opendir("/proc");
  if (!proc) return nullptr;
  const Shared* found = nullptr;
  int self = getpid();
  while (dirent* e = readdir(proc)) {
    int pid = std::atoi(e->d_name);
    if (pid <= 0 || pid == self) continue;
    std::string path = std::string("/proc/") + e->d_name + "/maps";
    FILE* f = std::fopen(path.c_str(), "re");
    if (!f) continue;
    char line[512];
    while (!found && std::fgets(line, sizeof line, f)) {
      std::uint64_t start, end, offset, inode;
      if (std::sscanf(line, "%" SCNx64 "-%" SCNx64 " %*s %" SCNx64 " %*s %" SCNu64, &start, &end,
                      &offset, &inode) != 4 ||
          inode == 0 || !std::strstr(line, "memfd:simgpu"))
        continue;
      for (const Shared& r : ranges)
        if (r.inode == inode && offset < r.end && offset + (end - start) > r.begin) found = &r;
    }
    std::fclose(f);
    if (found) {
      *who = pid;
      break;
    }
  }
  closedir(proc);
  return found;
}

CUresult refuse(const std::string& why) {
  log_once("checkpoint-shared:" + why,
           "driver checkpoint refused (CUDA_ERROR_NOT_SUPPORTED): " + why +
               "; drivers before 610 cannot checkpoint memory shared between processes");
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace

CUresult refuse_shared_memory_locked() {
  if (!g_mem.ipc_openings.empty())
    return refuse("the process has memory opened by cuIpcOpenMemHandle");
  auto imported = [](const std::shared_ptr<PhysAlloc>& p) { return p->imported; };
  for (auto& [id, p] : g_mem.phys)
    if (imported(p)) return refuse("the process holds an imported VMM allocation");
  for (auto& p : g_mem.orphans)
    if (imported(p)) return refuse("the process maps an imported VMM allocation");
  std::vector<Shared> exported;
  auto add_phys = [&](const std::shared_ptr<PhysAlloc>& p) {
    if (p->exported && p->fd)
      exported.push_back(
          {inode_of(p->fd.get()), 0, p->size, "a VMM allocation exported as a POSIX fd"});
  };
  for (auto& [id, p] : g_mem.phys) add_phys(p);
  for (auto& p : g_mem.orphans) add_phys(p);
  if (g_mem.heap_fd) {
    std::uint64_t heap_inode = inode_of(g_mem.heap_fd.get());
    for (auto& [addr, a] : g_mem.heap_allocs)
      if (a.ipc_exported)
        exported.push_back({heap_inode, addr - g_va.heap_base, addr - g_va.heap_base + a.size,
                            "memory exported by cuIpcGetMemHandle"});
  }
  int who = 0;
  if (const Shared* s = mapped_elsewhere(exported, &who))
    return refuse(std::string(s->what) + " is mapped by process " + std::to_string(who));
  return CUDA_SUCCESS;
}

}  // namespace gcr::simgpu
