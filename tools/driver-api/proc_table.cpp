// proc_table.cpp: the generated driver symbol list and cuGetProcAddress table as constant arrays,
// and the lookups declared in gcr/driver_api.h. Standard library only: constant data plus one
// function-local static index (thread-safe, built on first use, no heap), so any thread may call
// these at any time, before cuInit or during library load.
#include "gcr/driver_api.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <iterator>
#include <span>
#include <string_view>
#include <tuple>

namespace gcr::driver_api {
namespace {

#define GCR_PROC_LEGACY ProcFlavor::legacy
#define GCR_PROC_PTSZ ProcFlavor::per_thread
#define GCR_PROC_ENTRY(base, version, flavor, symbol) ProcEntry{base, version, flavor, #symbol},
constexpr ProcEntry kProcTable[] = {
#include "proc_table.gen.inc"
};
#undef GCR_PROC_ENTRY
#undef GCR_PROC_PTSZ
#undef GCR_PROC_LEGACY

#define GCR_DRIVER_SYMBOL(name) #name,
constexpr const char* kDriverSymbols[] = {
#include "driver_symbols.gen.inc"
};
#undef GCR_DRIVER_SYMBOL

constexpr std::string_view base_of(const ProcEntry& e) {
  return e.base;
}
constexpr std::string_view symbol_of(const ProcEntry& e) {
  return e.symbol;
}
constexpr std::string_view name_of(const char* name) {
  return name;
}
constexpr auto row_key(const ProcEntry& e) {
  return std::tuple(base_of(e), e.flavor, e.version);
}

static_assert(std::ranges::is_sorted(kProcTable, {}, row_key),
              "proc_table.gen.inc must be sorted by (base, flavor, version)");
static_assert(std::ranges::is_sorted(kDriverSymbols, {}, name_of),
              "driver_symbols.gen.inc must be sorted by name");

// Plain std algorithms rather than std::ranges ones: clang 14 cannot use libstdc++ 12's subrange.
struct ByBase {
  bool operator()(const ProcEntry& e, std::string_view base) const { return base_of(e) < base; }
  bool operator()(std::string_view base, const ProcEntry& e) const { return base < base_of(e); }
};

std::span<const ProcEntry> rows_for(std::string_view base) {
  auto [first, last] =
      std::equal_range(std::begin(kProcTable), std::end(kProcTable), base, ByBase{});
  return {first, last};
}

// Indices of kProcTable sorted by symbol, for find_by_symbol. Sorted on first use (a constexpr
// sort of this size exceeds clang's default constexpr step limit).
using SymbolIndex = std::array<std::size_t, std::size(kProcTable)>;
const SymbolIndex& symbol_index() {
  static const SymbolIndex index = [] {
    SymbolIndex out{};
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = i;
    std::sort(out.begin(), out.end(), [](std::size_t a, std::size_t b) {
      return symbol_of(kProcTable[a]) < symbol_of(kProcTable[b]);
    });
    return out;
  }();
  return index;
}

}  // namespace

std::span<const ProcEntry> proc_table() {
  return kProcTable;
}

std::span<const char* const> driver_symbols() {
  return kDriverSymbols;
}

bool is_driver_symbol(std::string_view name) {
  auto it = std::lower_bound(std::begin(kDriverSymbols), std::end(kDriverSymbols), name,
                             [](const char* s, std::string_view n) { return name_of(s) < n; });
  return it != std::end(kDriverSymbols) && name_of(*it) == name;
}

ProcResolution resolve_proc(std::string_view base, int cuda_version, unsigned long long flags,
                            bool default_per_thread) {
  bool per_thread;
  if (flags == kProcAddressDefault) {
    per_thread = default_per_thread;
  } else if (flags == kProcAddressLegacyStream) {
    per_thread = false;
  } else if (flags == kProcAddressPerThreadDefaultStream) {
    per_thread = true;
  } else {
    return {ProcStatus::invalid_flags, nullptr};
  }

  std::span<const ProcEntry> rows = rows_for(base);
  if (rows.empty()) return {ProcStatus::symbol_not_found, nullptr};

  // Rows are (flavor, version)-sorted: legacy ones first, then per-thread ones.
  auto first_per_thread = std::find_if(rows.begin(), rows.end(), [](const ProcEntry& e) {
    return e.flavor == ProcFlavor::per_thread;
  });
  bool has_per_thread = first_per_thread != rows.end();
  std::span<const ProcEntry> candidates = (per_thread && has_per_thread)
                                              ? std::span(first_per_thread, rows.end())
                                              : std::span(rows.begin(), first_per_thread);

  const ProcEntry* best = nullptr;
  for (const ProcEntry& e : candidates) {
    if (e.version <= cuda_version) best = &e;  // ascending versions: the last fit is the newest
  }
  if (best == nullptr) return {ProcStatus::version_not_sufficient, nullptr};
  return {ProcStatus::found, best->symbol};
}

const ProcEntry* find_by_symbol(std::string_view symbol) {
  const SymbolIndex& index = symbol_index();
  auto it = std::lower_bound(
      index.begin(), index.end(), symbol,
      [](std::size_t i, std::string_view s) { return symbol_of(kProcTable[i]) < s; });
  if (it == index.end() || symbol_of(kProcTable[*it]) != symbol) return nullptr;
  return &kProcTable[*it];
}

}  // namespace gcr::driver_api
