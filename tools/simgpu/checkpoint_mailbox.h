// The mailbox through which one process drives the driver checkpoint of another
// (cuCheckpointProcess*), as the real driver does through its kernel module.
//
// Note [Checkpoint mailbox]
// cuInit creates a 4 KiB memfd named "simgpu-checkpoint" and a thread, "simgpu-ckpt", that waits
// on it: that thread is the "restore thread" the API reports, and the driver's work happens on
// it, inside the target, so that CRIU's trick of resuming only that thread of a frozen process
// works. A caller finds the memfd through /proc/<pid>/fd (which needs the same rights as ptrace,
// as the real API does), opens it, takes flock(LOCK_EX) to be the only caller, writes a request,
// bumps request_seq and wakes the worker with a shared futex; the worker answers in place and
// sets response_seq. A memfd rather than a named socket: CRIU restores it as a new, private file
// in every restored copy of the process, so two restores of one image never collide on a name.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>

namespace gcr::simgpu {

inline constexpr char kMailboxName[] = "simgpu-checkpoint";
inline constexpr char kWorkerThreadName[] = "simgpu-ckpt";
inline constexpr std::uint32_t kMailboxMagic = 0x4b434753;  // "SGCK"
inline constexpr std::uint32_t kMailboxVersion = 1;
inline constexpr unsigned kMaxGpuPairs = 64;

enum class MailboxOp : std::uint32_t { lock = 1, checkpoint = 2, restore = 3, unlock = 4 };

struct Mailbox {
  std::uint32_t magic;
  std::uint32_t version;
  std::atomic<std::uint32_t> request_seq;
  std::atomic<std::uint32_t> response_seq;
  std::atomic<std::uint32_t> state;  // CUprocessState, kept current by the worker
  std::uint32_t op;                  // MailboxOp
  std::uint32_t timeout_ms;          // lock
  std::int32_t result;               // CUresult of the last request
  std::uint32_t pair_count;          // restore
  std::uint32_t reserved;            // must be zero
  CUcheckpointGpuPair pairs[kMaxGpuPairs];
};
static_assert(sizeof(Mailbox) <= 4096);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

}  // namespace gcr::simgpu
