// SIMGPU_DMA_CHECK=1: a device writes pinned host memory by DMA, past the page tables, so a page
// that userfaultfd write-protects (CRIU's --cow-dump, gcrd's tracking) would take the write
// without anyone seeing it. simgpu's copies are CPU writes, which fault like any other and so hide
// that; with the check, a device write that finds its page still write-protected (pagemap bit 57)
// ends the process with a message instead, as the silent corruption on a GPU would deserve. Note
// [Device writes to pinned host memory] in interpose/pinned.h is what keeps it from happening.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "simgpu.h"

namespace gcr::simgpu {

namespace {
bool enabled() {
  static const bool on = [] {
    const char* v = std::getenv("SIMGPU_DMA_CHECK");
    return v && std::string_view(v) == "1";
  }();
  return on;
}
}  // namespace

void check_device_write_to_host(const void* p, std::size_t n) {
  if (!enabled() || n == 0) return;
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  // Opened per check (only while checking): an fd kept open would be one more for CRIU to dump.
  int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  const auto start = reinterpret_cast<std::uintptr_t>(p) & ~(page - 1);
  const auto end = reinterpret_cast<std::uintptr_t>(p) + n;
  for (std::uintptr_t a = start; a < end; a += page) {
    std::uint64_t entry = 0;
    if (::pread(fd, &entry, sizeof entry, static_cast<off_t>(a / page * sizeof entry)) !=
        sizeof entry)
      break;
    if (entry & (1ull << 57)) {
      std::fprintf(stderr,
                   "simgpu: SIMGPU_DMA_CHECK: a device write to pinned host memory at %p found "
                   "its page write-protected: a GPU's DMA would have passed the protection "
                   "unseen\n",
                   reinterpret_cast<void*>(a));
      std::abort();
    }
  }
  ::close(fd);
}

}  // namespace gcr::simgpu
