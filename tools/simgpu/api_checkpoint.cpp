// The caller side of the driver checkpoint API: cuCheckpointProcess* on another process,
// through that process's mailbox (Note [Checkpoint mailbox]).
#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <string>

#include "checkpoint_mailbox.h"
#include "simgpu.h"

using namespace gcr::simgpu;
using gcr::UniqueFd;

namespace {

// Opens the mailbox of pid, or says why not: not a process, not ours to touch, or not CUDA.
CUresult open_mailbox(int pid, UniqueFd* out) {
  if (pid <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = opendir(dir.c_str());
  if (!d)
    return errno == EACCES || errno == EPERM ? CUDA_ERROR_NOT_PERMITTED : CUDA_ERROR_INVALID_VALUE;
  CUresult result = CUDA_ERROR_INVALID_VALUE;  // a process without a mailbox is not a CUDA process
  std::string wanted = std::string("/memfd:") + kMailboxName;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string link = dir + "/" + e->d_name;
    char target[256];
    ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = 0;
    if (std::strncmp(target, wanted.c_str(), wanted.size()) != 0) continue;
    int fd = open(link.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      result =
          errno == EACCES || errno == EPERM ? CUDA_ERROR_NOT_PERMITTED : CUDA_ERROR_INVALID_VALUE;
      break;
    }
    out->reset(fd);
    result = CUDA_SUCCESS;
    break;
  }
  closedir(d);
  return result;
}

class MappedMailbox {
 public:
  CUresult open(int pid) {
    if (CUresult r = open_mailbox(pid, &fd_)) return r;
    void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd_.get(), 0);
    if (p == MAP_FAILED) return CUDA_ERROR_OPERATING_SYSTEM;
    box_ = static_cast<Mailbox*>(p);
    if (box_->magic != kMailboxMagic || box_->version != kMailboxVersion)
      return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
  }
  ~MappedMailbox() {
    if (box_) munmap(box_, 4096);
  }
  Mailbox* operator->() { return box_; }
  int fd() const { return fd_.get(); }

 private:
  UniqueFd fd_;
  Mailbox* box_ = nullptr;
};

// Has pid exited? A pidfd says so even while the process is a zombie its parent has not reaped,
// when kill(pid, 0) still succeeds; kill is the fallback where pidfds are missing.
bool exited(int pid, int pidfd) {
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
  }
  return kill(pid, 0) != 0 && errno == ESRCH;
}

CUresult call(int pid, MailboxOp op, unsigned timeout_ms, const CUcheckpointGpuPair* pairs,
              unsigned pair_count) {
  if (pair_count > kMaxGpuPairs) return CUDA_ERROR_INVALID_VALUE;
  MappedMailbox box;
  if (CUresult r = box.open(pid)) return r;
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  // One caller at a time; the lock dies with a caller that dies.
  while (flock(box.fd(), LOCK_EX) != 0)
    if (errno != EINTR) return CUDA_ERROR_OPERATING_SYSTEM;
  box->op = static_cast<std::uint32_t>(op);
  box->timeout_ms = timeout_ms;
  box->pair_count = pair_count;
  if (pair_count) std::memcpy(box->pairs, pairs, pair_count * sizeof *pairs);
  std::uint32_t seq = box->request_seq.load() + 1;
  box->request_seq.store(seq, std::memory_order_release);
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&box->request_seq), FUTEX_WAKE, INT_MAX,
          nullptr, nullptr, 0);
  for (;;) {
    std::uint32_t got = box->response_seq.load(std::memory_order_acquire);
    if (got == seq) break;
    timespec ts{0, 100'000'000};
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&box->response_seq), FUTEX_WAIT, got, &ts,
            nullptr, 0);
    if (exited(pid, pidfd.get())) return CUDA_ERROR_INVALID_VALUE;  // the target died
  }
  CUresult r = static_cast<CUresult>(box->result);
  flock(box.fd(), LOCK_UN);
  return r;
}

bool reserved_zero(const void* p, std::size_t n) {
  auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i)
    if (b[i]) return false;
  return true;
}

}  // namespace

extern "C" {

CUresult cuCheckpointProcessGetRestoreThreadId(int pid, int* tid) {
  if (!tid) return CUDA_ERROR_INVALID_VALUE;
  MappedMailbox box;
  if (CUresult r = box.open(pid)) return r;
  std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = opendir(dir.c_str());
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  CUresult result = CUDA_ERROR_INVALID_VALUE;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string comm_path = dir + "/" + e->d_name + "/comm";
    int fd = open(comm_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char comm[32] = {};
    ssize_t n = read(fd, comm, sizeof comm - 1);
    close(fd);
    if (n > 0 && comm[n - 1] == '\n') comm[n - 1] = 0;
    if (std::strcmp(comm, kWorkerThreadName) == 0) {
      *tid = std::atoi(e->d_name);
      result = CUDA_SUCCESS;
      break;
    }
  }
  closedir(d);
  return result;
}

CUresult cuCheckpointProcessGetState(int pid, CUprocessState* state) {
  if (!state) return CUDA_ERROR_INVALID_VALUE;
  MappedMailbox box;
  if (CUresult r = box.open(pid)) return r;
  *state = static_cast<CUprocessState>(box->state.load());
  return CUDA_SUCCESS;
}

CUresult cuCheckpointProcessLock(int pid, CUcheckpointLockArgs* args) {
  if (args && (args->reserved0 || !reserved_zero(args->reserved1, sizeof args->reserved1)))
    return CUDA_ERROR_INVALID_VALUE;
  return call(pid, MailboxOp::lock, args ? args->timeoutMs : 0, nullptr, 0);
}

CUresult cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs* args) {
  if (args && !reserved_zero(args, sizeof *args)) return CUDA_ERROR_INVALID_VALUE;
  return call(pid, MailboxOp::checkpoint, 0, nullptr, 0);
}

CUresult cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs* args) {
  const CUcheckpointGpuPair* pairs = nullptr;
  unsigned count = 0;
  if (args) {
    if (!reserved_zero(args->reserved, sizeof args->reserved) || args->reserved1)
      return CUDA_ERROR_INVALID_VALUE;
    if (args->gpuPairsCount && !args->gpuPairs) return CUDA_ERROR_INVALID_VALUE;
    pairs = args->gpuPairs;
    count = args->gpuPairsCount;
  }
  return call(pid, MailboxOp::restore, 0, pairs, count);
}

CUresult cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs* args) {
  if (args && !reserved_zero(args, sizeof *args)) return CUDA_ERROR_INVALID_VALUE;
  return call(pid, MailboxOp::unlock, 0, nullptr, 0);
}

}  // extern "C"
