// The target side of the driver checkpoint API: the worker thread of Note [Checkpoint mailbox]
// and the state machine RUNNING -> LOCKED -> CHECKPOINTED -> (restore) LOCKED -> RUNNING.
#include <linux/futex.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <cstring>

#include "checkpoint_mailbox.h"
#include "simgpu.h"

namespace gcr::simgpu {
namespace {

Mailbox* g_box = nullptr;
UniqueFd g_box_fd;  // kept open: it is how other processes find the mailbox

long futex(std::atomic<std::uint32_t>* w, int op, std::uint32_t v) {
  return syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(w), op, v, nullptr, nullptr, 0);
}

// The devices this process uses: its contexts' and its memory's.
std::vector<bool> devices_in_use() {
  std::vector<bool> used(config().device_count, false);
  for (CUctx_st* ctx : all_contexts()) used[ctx->device] = true;
  for (int d = 0; d < config().device_count; ++d)
    if (device(d).used_bytes.load() > 0) used[d] = true;
  return used;
}

int physical_of_uuid(const CUuuid& u) {
  for (int d = 0; d < config().device_count; ++d)
    if (std::memcmp(config().uuids[d].bytes, u.bytes, sizeof u.bytes) == 0) return d;
  return -1;
}

CUresult handle(Mailbox& box) {
  auto state = static_cast<CUprocessState>(box.state.load());
  switch (static_cast<MailboxOp>(box.op)) {
    case MailboxOp::lock: {
      if (state != CU_PROCESS_STATE_RUNNING) return CUDA_ERROR_ILLEGAL_STATE;
      auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(box.timeout_ms);
      if (!g_gate.lock(box.timeout_ms)) return CUDA_ERROR_NOT_READY;
      // Work already queued runs to completion now, while every thread of the process is still
      // running: once CRIU freezes it, no stream worker could finish it. The timeout covers this
      // wait too: past it the process is left RUNNING, as documented.
      if (box.timeout_ms == 0) {
        drain_all_streams();
      } else if (!drain_all_streams_until(deadline)) {
        g_gate.unlock();
        return CUDA_ERROR_NOT_READY;
      }
      box.state = CU_PROCESS_STATE_LOCKED;
      return CUDA_SUCCESS;
    }
    case MailboxOp::checkpoint: {
      if (state != CU_PROCESS_STATE_LOCKED) return CUDA_ERROR_ILLEGAL_STATE;
      drain_all_streams();
      if (CUresult r = memory_checkpoint()) return r;
      box.state = CU_PROCESS_STATE_CHECKPOINTED;
      return CUDA_SUCCESS;
    }
    case MailboxOp::restore: {
      if (state != CU_PROCESS_STATE_CHECKPOINTED) return CUDA_ERROR_ILLEGAL_STATE;
      // Note [Migration keeps ordinals]: gpuPairs name physical GPUs by UUID; the process keeps
      // its device ordinals, and each ordinal now stands for the GPU its old one was paired with
      // (a real driver does the same: cuDeviceGetUuid(ordinal) answers the new GPU).
      int n = config().device_count;
      std::vector<int> map(n);  // old physical GPU -> new physical GPU
      for (int d = 0; d < n; ++d) map[d] = d;
      if (box.pair_count > kMaxGpuPairs) return CUDA_ERROR_INVALID_VALUE;
      if (box.pair_count > 0) {
        std::vector<bool> covered(n, false);
        for (unsigned i = 0; i < box.pair_count; ++i) {
          int from = physical_of_uuid(box.pairs[i].oldUuid),
              to = physical_of_uuid(box.pairs[i].newUuid);
          if (from < 0 || to < 0) return CUDA_ERROR_INVALID_DEVICE;
          map[from] = to;
          covered[from] = true;
        }
        // As documented: the pairs must name every GPU the process was checkpointed on.
        std::vector<bool> used = devices_in_use();
        for (int d = 0; d < n; ++d)
          if (used[d] && !covered[physical_device(d)]) return CUDA_ERROR_INVALID_VALUE;
      }
      std::vector<int> next(n);
      for (int d = 0; d < n; ++d) next[d] = map[physical_device(d)];
      if (CUresult r = memory_restore()) return r;
      set_physical_devices(next);
      box.state = CU_PROCESS_STATE_LOCKED;
      return CUDA_SUCCESS;
    }
    case MailboxOp::unlock: {
      if (state != CU_PROCESS_STATE_LOCKED) return CUDA_ERROR_ILLEGAL_STATE;
      box.state = CU_PROCESS_STATE_RUNNING;
      g_gate.unlock();
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

void worker_loop() {
  // The mailbox starts at sequence 0: a request posted before this thread first runs (as soon as
  // cuInit has returned) is still pending, not taken as served.
  std::uint32_t served = 0;
  for (;;) {
    std::uint32_t seq = g_box->request_seq.load(std::memory_order_acquire);
    if (seq == served) {
      futex(&g_box->request_seq, FUTEX_WAIT, seq);  // shared futex: the caller is another process
      continue;
    }
    g_box->result = handle(*g_box);
    served = seq;
    g_box->response_seq.store(seq, std::memory_order_release);
    futex(&g_box->response_seq, FUTEX_WAKE, INT_MAX);
  }
}

}  // namespace

CUresult start_checkpoint_worker() {
  UniqueFd fd(memfd_create(kMailboxName, MFD_CLOEXEC));
  if (!fd || ftruncate(fd.get(), 4096) != 0) return CUDA_ERROR_OPERATING_SYSTEM;
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OPERATING_SYSTEM;
  g_box = new (p) Mailbox{};
  g_box->magic = kMailboxMagic;
  g_box->version = kMailboxVersion;
  g_box->state = CU_PROCESS_STATE_RUNNING;
  g_box_fd = std::move(fd);
  // The worker must exist for the life of the process, and must not keep exit from finishing.
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(
      &t, &attr,
      [](void*) -> void* {
        worker_loop();
        return nullptr;
      },
      nullptr);
  pthread_attr_destroy(&attr);
  if (rc != 0) return CUDA_ERROR_OPERATING_SYSTEM;
  pthread_setname_np(t, kWorkerThreadName);
  return CUDA_SUCCESS;
}

}  // namespace gcr::simgpu
