#include "gate.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstddef>
#include <thread>

__attribute__((visibility("hidden"))) volatile unsigned char gcr_gate_closed = 0;

namespace gcr::interpose {

std::atomic<std::uint64_t> g_calls_inside{0};

namespace {
// Note [The gate seen from the kernel]
// Waiters sleep on `generation`; gate_open bumps it and wakes them. The magic just before it lets
// `gcr checkpoint --trace` (trace/sched.bpf.c) tell a futex wait at the gate from any other
// without symbols or uprobes (a uprobe leaves a [uprobes] mapping that CRIU refuses to dump): a
// futex wait on a word preceded by kGateMagic is a thread entering the gate, and the zero-count
// wake a waiter makes as it leaves marks its way out. Neither is on the launch path: only a thread
// that found the gate closed makes them.
struct alignas(16) GateWord {
  std::uint64_t magic = 0x3145544147726367ull;  // "gcrGATE1" (trace/sched_event.h)
  std::atomic<std::uint32_t> generation{0};
};
static_assert(offsetof(GateWord, generation) == 8);
GateWord g_gate;
std::atomic<std::uint32_t>& g_open_generation = g_gate.generation;

long futex(std::atomic<std::uint32_t>* w, int op, std::uint32_t v, const timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(w), op, v, ts, nullptr, 0);
}
}  // namespace

void gate_wait_open() {
  bool waited = false;
  while (gcr_gate_closed) {
    std::uint32_t gen = g_open_generation.load(std::memory_order_acquire);
    if (!gcr_gate_closed) break;
    timespec ts{0, 100'000'000};
    futex(&g_open_generation, FUTEX_WAIT_PRIVATE, gen, &ts);
    waited = true;
  }
  if (waited) futex(&g_open_generation, FUTEX_WAKE_PRIVATE, 0, nullptr);  // "left the gate"
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
