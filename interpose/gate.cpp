#include "gate.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <thread>

__attribute__((visibility("hidden"))) volatile unsigned char gcr_gate_closed = 0;

namespace gcr::interpose {

std::atomic<std::uint64_t> g_calls_inside{0};

namespace {
// Waiters sleep on this word; gate_open bumps it and wakes them.
std::atomic<std::uint32_t> g_open_generation{0};

long futex(std::atomic<std::uint32_t>* w, int op, std::uint32_t v, const timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(w), op, v, ts, nullptr, 0);
}
}  // namespace

void gate_wait_open() {
  while (gcr_gate_closed) {
    std::uint32_t gen = g_open_generation.load(std::memory_order_acquire);
    if (!gcr_gate_closed) break;
    timespec ts{0, 100'000'000};
    futex(&g_open_generation, FUTEX_WAIT_PRIVATE, gen, &ts);
  }
}

bool gate_close(unsigned timeout_ms) {
  gcr_gate_closed = 1;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (g_calls_inside.load(std::memory_order_seq_cst) != 0) {
    if (timeout_ms && std::chrono::steady_clock::now() >= deadline) {
      gate_open();
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

void gate_open() {
  gcr_gate_closed = 0;
  g_open_generation.fetch_add(1, std::memory_order_release);
  futex(&g_open_generation, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr);
}

}  // namespace gcr::interpose
