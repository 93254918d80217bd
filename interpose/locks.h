// The interposer's locks: one ranked mutex type, the order they are taken in, and the checks.
//
// Note [Lock order]
// Every mutex of the interposer is a RankedMutex with a LockRank. A thread holding locks takes
// only a lock of a later rank than every lock it holds, in this order (outermost first):
//
//   agent_start    starting the agent thread; held from the fork hooks' prepare to parent/child
//   regions        the region table, the arena, slabs and the program's VMM handles
//   ipc_memory     regions shared through CUDA IPC: export keys, opened tokens (under regions)
//   contexts       the contexts regions were made in
//   copy_streams   the streams soft copy-on-write copies on, one per context
//   host_memory    pinned host memory: registrations and the DMA ranges gcrd reads
//   pinned         writers of the pinned ranges written inside a freeze
//   functions      the per-function parameter layouts (writers; launches read without it)
//   sharing        what the process shares (IPC events, pools, external memory): blockers
//   validation     GCR_TRACK=validate's profile and scratch (a leaf)
//   drain          one park's drain of in-flight copies (a leaf, local to a park)
//
// No lock is held across a call into the driver that may block on another thread of the program
// taking one of these, and none at all on the launch path (Note [Write tracking]: launches read
// lock-free). Two checks hold the order to this list:
// - clang's thread-safety analysis (style.thread_safety compiles the interposer with
//   -Wthread-safety): state is GUARDED_BY its mutex and functions that expect a lock say REQUIRES,
//   so touching guarded state without its lock fails the build;
// - every acquisition checks the ranks this thread holds (a bit set in thread-local storage, two
//   instructions): taking a rank at or before one held is reported once on stderr, naming both,
//   and aborts the program when GCR_LOCK_ORDER=abort (read with the interposer's configuration,
//   config.h; scripts/test.sh sets it for every test).
#pragma once

#include <mutex>

#if defined(__clang__)
#define GCR_TSA(x) __attribute__((x))
#else
#define GCR_TSA(x)
#endif
#define GCR_CAPABILITY(name) GCR_TSA(capability(name))
#define GCR_SCOPED_CAPABILITY GCR_TSA(scoped_lockable)
#define GCR_GUARDED_BY(mu) GCR_TSA(guarded_by(mu))
#define GCR_PT_GUARDED_BY(mu) GCR_TSA(pt_guarded_by(mu))
#define GCR_REQUIRES(...) GCR_TSA(requires_capability(__VA_ARGS__))
#define GCR_EXCLUDES(...) GCR_TSA(locks_excluded(__VA_ARGS__))
#define GCR_ACQUIRE(...) GCR_TSA(acquire_capability(__VA_ARGS__))
#define GCR_RELEASE(...) GCR_TSA(release_capability(__VA_ARGS__))
#define GCR_NO_THREAD_SAFETY_ANALYSIS GCR_TSA(no_thread_safety_analysis)

namespace gcr::interpose {

enum class LockRank : unsigned {
  agent_start,
  regions,
  ipc_memory,
  contexts,
  copy_streams,
  host_memory,
  pinned,
  functions,
  sharing,
  validation,
  drain,
};

// Called by RankedMutex around the real lock and unlock (locks.cpp).
void lock_order_acquire(LockRank rank) noexcept;
void lock_order_release(LockRank rank) noexcept;
// Whether a violation aborts the program after it is reported (config(): GCR_LOCK_ORDER=abort).
void lock_order_abort_on_violation(bool abort) noexcept;

class GCR_CAPABILITY("mutex") RankedMutex {
 public:
  explicit constexpr RankedMutex(LockRank rank) noexcept : rank_(rank) {}
  RankedMutex(const RankedMutex&) = delete;
  RankedMutex& operator=(const RankedMutex&) = delete;

  void lock() GCR_ACQUIRE() {
    lock_order_acquire(rank_);
    mu_.lock();
  }
  void unlock() GCR_RELEASE() {
    mu_.unlock();
    lock_order_release(rank_);
  }

 private:
  std::mutex mu_;
  LockRank rank_;
};

// std::lock_guard for a RankedMutex, visible to the analysis (libstdc++'s guards are not).
class GCR_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(RankedMutex& mu) GCR_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() GCR_RELEASE() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  RankedMutex& mu_;
};

}  // namespace gcr::interpose
