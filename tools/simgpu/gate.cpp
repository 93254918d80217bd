// The API gate (Note in simgpu.h): how the checkpoint API's lock blocks a process's CUDA calls.
// The state word counts calls inside the gate and carries the locked bit; waiting is a futex on
// that word, so a blocked call costs nothing while the lock is held.
#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <ctime>

#include "simgpu.h"

namespace gcr::simgpu {

Gate g_gate;
std::atomic<bool> g_initialized{false};
std::atomic<bool> g_forked_child{false};

namespace {
void after_fork_child() {
  g_forked_child.store(true, std::memory_order_release);
  g_gate.reset_in_child();  // a checkpoint lock or another thread's call stayed in the parent
}

long futex(std::atomic<std::uint32_t>* word, int op, std::uint32_t val, const timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, val, ts, nullptr, 0);
}
}  // namespace

void Gate::enter() noexcept {
  std::uint32_t s = state_.load(std::memory_order_acquire);
  for (;;) {
    if (s & kLocked) {
      futex(&state_, FUTEX_WAIT_PRIVATE, s, nullptr);
      s = state_.load(std::memory_order_acquire);
      continue;
    }
    if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) return;
  }
}

void Gate::exit() noexcept {
  std::uint32_t before = state_.fetch_sub(1, std::memory_order_acq_rel);
  if ((before & kLocked) && (before & ~kLocked) == 1)
    futex(&state_, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr);
}

bool Gate::lock(unsigned timeout_ms) noexcept {
  state_.fetch_or(kLocked, std::memory_order_acq_rel);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    std::uint32_t s = state_.load(std::memory_order_acquire);
    if ((s & ~kLocked) == 0) return true;
    timespec ts{0, 50'000'000};  // re-check at least every 50 ms
    if (timeout_ms != 0) {
      auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::nanoseconds(0)) {
        unlock();
        return false;
      }
      if (left < std::chrono::nanoseconds(ts.tv_nsec))
        ts.tv_nsec = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    }
    futex(&state_, FUTEX_WAIT_PRIVATE, s, &ts);
  }
}

void Gate::unlock() noexcept {
  state_.fetch_and(~kLocked, std::memory_order_acq_rel);
  futex(&state_, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr);
}

bool Gate::locked() const noexcept {
  return state_.load() & kLocked;
}

void refuse_in_forked_children() {
  pthread_atfork(nullptr, nullptr, after_fork_child);
}

ApiCall::ApiCall(bool needs_init) noexcept {
  g_gate.enter();
  if (g_forked_child.load(std::memory_order_acquire) ||
      (needs_init && !g_initialized.load(std::memory_order_acquire)))
    status_ = CUDA_ERROR_NOT_INITIALIZED;  // Note [Forked child]
}

}  // namespace gcr::simgpu
