// The counting gate of Note [A consistent cut].
#include "cut.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace gcr::interpose {

std::atomic<bool> g_comm_possible{false};
std::atomic<std::uint64_t> g_comm_issued{0};

namespace {

constexpr std::uint64_t kNoCut = ~0ull;
std::atomic<std::uint64_t> g_admitted{0};
std::atomic<std::uint64_t> g_target{kNoCut};
std::atomic<std::uint32_t> g_waiting{0};

control::CutCounts counts() {
  return {g_admitted.load(), g_comm_issued.load(), g_target.load(), g_waiting.load()};
}

void set_target(std::uint64_t t) {
  g_target.store(t, std::memory_order_seq_cst);
  g_target.notify_all();
}

std::atomic<const std::vector<SharedRange>*> g_ranges{nullptr};

}  // namespace

bool in_shared_range(std::uint64_t address) noexcept {
  const std::vector<SharedRange>* r = g_ranges.load(std::memory_order_acquire);
  if (!r) return false;
  for (const SharedRange& s : *r)
    if (address >= s.begin && address < s.end) return true;
  return false;
}

void shared_range_add(std::uint64_t begin, std::uint64_t end) {
  const std::vector<SharedRange>* old = g_ranges.load();
  if (old)
    for (const SharedRange& s : *old)
      if (s.begin == begin && s.end == end) return;
  auto* next = new std::vector<SharedRange>(old ? *old : std::vector<SharedRange>{});
  next->push_back({begin, end});
  g_ranges.store(next, std::memory_order_release);  // `old` stays: a reader may hold it
}

bool comm_kernel_name(const char* name) {
  if (!name || !*name) return false;
  if (std::strstr(name, "ncclDevKernel") || std::strstr(name, "ncclKernel")) return true;
  static const std::vector<std::string> configured = [] {
    std::vector<std::string> out;
    const char* e = std::getenv("GCR_COMM_KERNELS");
    std::string s = e ? e : "";
    for (std::size_t at = 0; at <= s.size();) {
      std::size_t comma = s.find(',', at);
      if (comma == std::string::npos) comma = s.size();
      if (comma > at) out.push_back(s.substr(at, comma - at));
      at = comma + 1;
    }
    return out;
  }();
  for (const std::string& part : configured)
    if (std::strstr(name, part.c_str())) return true;
  return false;
}

void cut_admit() noexcept {
  for (;;) {
    // Dekker-style against op_cut(begin): either this launch sees the new target, or begin sees
    // this launch counted and raises the target over it.
    std::uint64_t a = g_admitted.fetch_add(1, std::memory_order_seq_cst);
    std::uint64_t t = g_target.load(std::memory_order_seq_cst);
    if (a < t) return;
    g_admitted.fetch_sub(1, std::memory_order_seq_cst);
    g_waiting.fetch_add(1);
    g_target.wait(t, std::memory_order_seq_cst);
    g_waiting.fetch_sub(1);
  }
}

control::CutCounts op_cut(control::CutOp op, std::uint64_t value) {
  switch (op) {
    case control::CutOp::begin: {
      std::uint64_t t = g_admitted.load(std::memory_order_seq_cst);
      g_target.store(t, std::memory_order_seq_cst);
      for (;;) {  // launches counted while the target was being set stay admitted
        std::uint64_t a = g_admitted.load(std::memory_order_seq_cst);
        if (a <= g_target.load()) break;
        set_target(a);
      }
      break;
    }
    case control::CutOp::target:  // only raised, and only during a cut
      if (std::uint64_t t = g_target.load(); t != kNoCut && value > t) set_target(value);
      break;
    case control::CutOp::read:
      break;
    case control::CutOp::end:
      if (g_target.load() != kNoCut) set_target(kNoCut);
      break;
  }
  return counts();
}

}  // namespace gcr::interpose
