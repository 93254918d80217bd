// The shared state of CU_EVENT_INTERPROCESS events (ipc.h): a page of a memfd that every process
// holding the event maps, waited on through a shared (not process-private) futex.
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <ctime>

#include "ipc.h"

namespace gcr::simgpu {
namespace {

SharedEventState* map_state(int fd) {
  void* p = mmap(nullptr, kSharedEventBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<SharedEventState*>(p);
}

}  // namespace

CUresult create_shared_event(CUevent_st* e) {
  UniqueFd fd = make_memfd("simgpu-event", kSharedEventBytes);
  if (!fd || !seal_size(fd.get())) return CUDA_ERROR_OUT_OF_MEMORY;
  SharedEventState* s = map_state(fd.get());
  if (!s) return CUDA_ERROR_MAP_FAILED;
  s->magic = SharedEventState::kMagic;
  e->shared = s;
  e->shared_fd = std::move(fd);
  return CUDA_SUCCESS;
}

CUresult open_shared_event(const IpcEventHandle& h, CUevent_st* e) {
  UniqueFd fd;
  if (CUresult r = open_peer_fd(h.pid, h.fd, h.inode, &fd)) return r;
  SharedEventState* s = map_state(fd.get());
  if (!s) return CUDA_ERROR_MAP_FAILED;
  if (s->magic != SharedEventState::kMagic) {
    munmap(s, kSharedEventBytes);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  e->shared = s;
  e->shared_fd = std::move(fd);
  return CUDA_SUCCESS;
}

void close_shared_event(CUevent_st* e) {
  if (e->shared) munmap(e->shared, kSharedEventBytes);
  e->shared = nullptr;
  e->shared_fd.reset();
}

void complete_shared_event(SharedEventState* s, std::uint64_t generation) {
  std::uint64_t seen = s->completed.load(std::memory_order_relaxed);
  while (seen < generation &&
         !s->completed.compare_exchange_weak(seen, generation, std::memory_order_release))
    ;
  s->wake.fetch_add(1, std::memory_order_release);
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&s->wake), FUTEX_WAKE, INT_MAX, nullptr,
          nullptr, 0);
}

bool shared_event_reached(const SharedEventState* s, std::uint64_t generation) {
  return s->completed.load(std::memory_order_acquire) >= generation;
}

void wait_shared_event(SharedEventState* s, std::uint64_t generation) {
  for (;;) {
    std::uint32_t w = s->wake.load(std::memory_order_acquire);
    if (shared_event_reached(s, generation)) return;
    // Bounded, so that a waker in a process that died between its store and its wake cannot
    // leave a waiter asleep for good.
    timespec limit{0, 50'000'000};
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&s->wake), FUTEX_WAIT, w, &limit, nullptr,
            0);
  }
}

}  // namespace gcr::simgpu
