// kernel_tracks_soft_dirty: see gcr/criu.h.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

#include "gcr/criu.h"
#include "gcr/unique_fd.h"

namespace gcr::criu {
namespace {

// Clears this process's soft-dirty bits (harmless: nothing of gcr's reads its own), writes a
// page, and reads the page's bit back from /proc/self/pagemap (bit 55).
bool try_soft_dirty() {
  const long page = ::sysconf(_SC_PAGESIZE);
  void* m = ::mmap(nullptr, static_cast<std::size_t>(page), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return false;
  static_cast<volatile char*>(m)[0] = 1;
  bool set = false;
  UniqueFd clear(::open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC));
  if (clear && ::write(clear.get(), "4", 1) == 1) {
    static_cast<volatile char*>(m)[0] = 2;
    UniqueFd map(::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC));
    std::uint64_t entry = 0;
    auto at = static_cast<off_t>(reinterpret_cast<std::uintptr_t>(m) / page * sizeof entry);
    if (map && ::pread(map.get(), &entry, sizeof entry, at) == sizeof entry)
      set = (entry >> 55) & 1;
  }
  ::munmap(m, static_cast<std::size_t>(page));
  return set;
}

}  // namespace

bool kernel_tracks_soft_dirty() {
  static const bool tracks = try_soft_dirty();
  return tracks;
}

}  // namespace gcr::criu
