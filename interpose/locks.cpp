// Note [Lock order] in locks.h: the run-time check of the order.
#include "locks.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace gcr::interpose {
namespace {

constexpr const char* kRankNames[] = {
    "agent_start", "regions",   "ipc_memory", "contexts",   "copy_streams", "host_memory",
    "pinned",      "functions", "sharing",    "validation", "drain",
};
static_assert(sizeof kRankNames / sizeof kRankNames[0] == unsigned(LockRank::drain) + 1);

thread_local unsigned t_held = 0;     // a bit per rank this thread holds
std::atomic<unsigned> g_reported{0};  // taken-rank bits already reported

unsigned bit(LockRank rank) {
  return 1u << static_cast<unsigned>(rank);
}

std::atomic<bool> g_abort{false};  // GCR_LOCK_ORDER=abort, from the configuration (config.h)

[[gnu::noinline, gnu::cold]] void report(LockRank taken, unsigned held_later) noexcept {
  const bool abort_now = g_abort.load(std::memory_order_relaxed);
  if (!(g_reported.fetch_or(bit(taken)) & bit(taken)) || abort_now) {
    unsigned held = static_cast<unsigned>(__builtin_ctz(held_later));
    std::fprintf(stderr,
                 "gcr: interposer lock order violated: took '%s' while holding '%s' (Note [Lock "
                 "order] in interpose/locks.h); please report this\n",
                 kRankNames[static_cast<unsigned>(taken)], kRankNames[held]);
  }
  if (abort_now) std::abort();
}

}  // namespace

void lock_order_acquire(LockRank rank) noexcept {
  const unsigned at_or_after = ~(bit(rank) - 1);
  if (t_held & at_or_after) [[unlikely]]
    report(rank, t_held & at_or_after);
  t_held |= bit(rank);
}

void lock_order_abort_on_violation(bool abort) noexcept {
  g_abort.store(abort, std::memory_order_relaxed);
}

void lock_order_release(LockRank rank) noexcept {
  t_held &= ~bit(rank);
}

}  // namespace gcr::interpose
