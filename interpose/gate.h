// The API gate: quiesce closes it, and no application call reaches the driver until it reopens.
//
// Wrapped functions count themselves in (GateScope); forwarded functions (the trampolines) only
// check the closed flag on entry, since a tail call cannot count itself out. Quiesce closes the
// gate, waits for counted calls to leave, then drains the streams, which also finishes whatever a
// forwarded call queued. The cost on the hot path is two uncontended atomic adds.
#pragma once

#include <atomic>
#include <cstdint>

extern "C" volatile unsigned char gcr_gate_closed;  // read by the trampolines

namespace gcr::interpose {

extern std::atomic<std::uint64_t> g_calls_inside;

void gate_wait_open();  // blocks while the gate is closed

class GateScope {
 public:
  GateScope() noexcept {
    for (;;) {
      g_calls_inside.fetch_add(1, std::memory_order_seq_cst);
      // A seq_cst load: gate_close's store and this count must not both be missed (Dekker). On
      // x86-64 the locked add already orders it (a plain load); on aarch64 a plain load may pass
      // the add's store-release (ldaxr/stlxr), so it is an ldarb.
      if (__builtin_expect(!__atomic_load_n(&gcr_gate_closed, __ATOMIC_SEQ_CST), 1)) return;
      g_calls_inside.fetch_sub(1, std::memory_order_seq_cst);
      gate_wait_open();
    }
  }
  ~GateScope() { g_calls_inside.fetch_sub(1, std::memory_order_release); }
  GateScope(const GateScope&) = delete;
  GateScope& operator=(const GateScope&) = delete;
};

// Closes the gate and waits up to timeout_ms for counted calls to leave; false (and the gate
// reopened) on timeout.
bool gate_close(unsigned timeout_ms);
void gate_open();

}  // namespace gcr::interpose
