// Note [Device writes to pinned host memory] (pinned.h).
#include "pinned.h"
#include "locks.h"

#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace gcr::interpose {

std::atomic<std::uint32_t> g_pinned_armed{0};
std::atomic<bool> g_pinned_unseen{false};

namespace {

struct PinnedRange {
  std::uint64_t start = 0, end = 0;
  std::uint64_t pages = 0;  // pages the range touches
  std::atomic<bool> armed{false};
  std::atomic<std::uint64_t> pages_left{0};
  // One bit per page: written since the range was armed (its protection, if any, is gone).
  std::unique_ptr<std::atomic<std::uint64_t>[]> done;
};

// Immutable once published; readers find it through g_table while g_readers counts them.
struct PinnedTable {
  std::vector<PinnedRange*> by_start;
};

// The writers' side (add, remove, arm); readers go through g_table.
struct PinnedWriters {
  RankedMutex mu{LockRank::pinned};
  std::vector<std::unique_ptr<PinnedRange>> ranges GCR_GUARDED_BY(mu);
  // The process whose memory the last cut protected (its start time, /proc/self/stat): a
  // restored process is another, whose memory CRIU gave back unprotected, though this state came
  // back too.
  std::uint64_t cut_incarnation GCR_GUARDED_BY(mu) = 0;
};
PinnedWriters g_pinned;
std::atomic<PinnedTable*> g_table{nullptr};
std::atomic<int> g_readers{0};
// Every armed range lies within [g_armed_lo, g_armed_hi): most addresses are turned away by two
// loads, without looking at the table.
std::atomic<std::uint64_t> g_armed_lo{~0ull}, g_armed_hi{0};

std::uint64_t incarnation() {
  std::FILE* f = std::fopen("/proc/self/stat", "re");
  if (!f) return 0;
  char buf[1024];
  std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char* p = std::strrchr(buf, ')');  // past the command name, which may hold anything
  unsigned long long start = 0;
  // Fields 3..22 after the name; starttime is the 22nd.
  if (!p || std::sscanf(p + 1,
                        " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d "
                        "%*d %llu",
                        &start) != 1)
    return 0;
  return start;
}

std::uint64_t page_bytes() {
  static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

void disarm(PinnedRange& r) {
  if (r.armed.exchange(false, std::memory_order_acq_rel))
    g_pinned_armed.fetch_sub(1, std::memory_order_acq_rel);
}

// Publishes a table of the current ranges (with g_pinned.mu held) and frees the old one once no
// reader can hold it.
void publish(std::vector<std::unique_ptr<PinnedRange>> retired = {}) GCR_REQUIRES(g_pinned.mu) {
  auto next = std::make_unique<PinnedTable>();
  for (const auto& r : g_pinned.ranges) next->by_start.push_back(r.get());
  std::sort(next->by_start.begin(), next->by_start.end(),
            [](const PinnedRange* a, const PinnedRange* b) { return a->start < b->start; });
  PinnedTable* old = g_table.exchange(next.release(), std::memory_order_seq_cst);
  while (g_readers.load(std::memory_order_seq_cst) != 0) ::sched_yield();
  delete old;
  // `retired` goes with this scope, after the readers that could see it.
}

class ReadTable {
 public:
  ReadTable() {
    g_readers.fetch_add(1, std::memory_order_seq_cst);
    table_ = g_table.load(std::memory_order_seq_cst);
  }
  ~ReadTable() { g_readers.fetch_sub(1, std::memory_order_seq_cst); }
  ReadTable(const ReadTable&) = delete;
  ReadTable& operator=(const ReadTable&) = delete;
  const PinnedTable* operator->() const { return table_; }
  explicit operator bool() const { return table_ != nullptr; }

 private:
  const PinnedTable* table_;
};

// A write to the byte at p that leaves it as it is, and is atomic against any other writer, a
// device's included. Not an atomic add of zero: compilers may turn that into a fenced load, which
// would not fault.
inline void write_in_place(std::uint64_t address) {
  auto* p = reinterpret_cast<unsigned char*>(address);
  unsigned char v = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(p, &v, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

// Whether this kernel has MADV_POPULATE_WRITE (Linux 5.14), asked once on a page of our own: its
// EINVAL means "unknown advice" only here; on a run of pinned memory it means a mapping it cannot
// populate (I/O memory, read-only since), which is left alone.
bool can_populate() {
  static const bool yes = [] {
    void* m =
        ::mmap(nullptr, page_bytes(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return false;
    bool ok = ::madvise(m, page_bytes(), MADV_POPULATE_WRITE) == 0;
    ::munmap(m, page_bytes());
    return ok;
  }();
  return yes;
}

// The pages of [start, end) (page-aligned) taken as if written: MADV_POPULATE_WRITE faults each for
// writing where it is not writable now (a protected page's fault is served like a write's), in one
// call, and says EFAULT or ENOMEM where nothing is mapped instead of crashing. A kernel without it
// gets a write to each page.
void write_run(std::uint64_t start, std::uint64_t end) {
  if (!can_populate()) {
    for (std::uint64_t p = start; p < end; p += page_bytes()) write_in_place(p);
    return;
  }
  while (::madvise(reinterpret_cast<void*>(start), end - start, MADV_POPULATE_WRITE) != 0 &&
         (errno == EINTR || errno == EAGAIN)) {
  }
}

// Writes every page of [from, to) (within r) that may still be protected.
void write_pages(PinnedRange& r, std::uint64_t from, std::uint64_t to) {
  from = std::max(from, r.start);
  to = std::min(to, r.end);
  if (from >= to || !r.armed.load(std::memory_order_acquire)) return;
  const std::uint64_t page = page_bytes();
  const std::uint64_t first_page = r.start & ~(page - 1);
  std::uint64_t run = 0, run_end = 0;
  auto flush = [&] {
    if (run == run_end) return;
    write_run(run, run_end);
    for (std::uint64_t p = run; p < run_end; p += page) {
      const std::uint64_t i = (p - first_page) / page;
      const std::uint64_t bit = 1ull << (i % 64);
      if (!(r.done[i / 64].fetch_or(bit, std::memory_order_acq_rel) & bit) &&
          r.pages_left.fetch_sub(1, std::memory_order_acq_rel) == 1)
        disarm(r);
    }
    run = run_end = 0;
  };
  for (std::uint64_t p = from & ~(page - 1); p < to; p += page) {
    const std::uint64_t i = (p - first_page) / page;
    if (r.done[i / 64].load(std::memory_order_acquire) & (1ull << (i % 64))) {
      flush();
      continue;
    }
    if (run == run_end) run = p;
    run_end = p + page;
  }
  flush();
}

// The address ranges of this process's writable mappings, merged, in order.
std::vector<std::pair<std::uint64_t, std::uint64_t>> writable_mappings() {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
  std::FILE* f = std::fopen("/proc/self/maps", "re");
  if (!f) return out;
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    unsigned long long start = 0, end = 0;
    char perms[5] = {};
    if (std::sscanf(line, "%llx-%llx %4s", &start, &end, perms) != 3 || perms[1] != 'w') continue;
    if (!out.empty() && out.back().second == start)
      out.back().second = end;
    else
      out.emplace_back(start, end);
  }
  std::fclose(f);
  return out;
}

bool covered(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& maps, std::uint64_t start,
             std::uint64_t end) {
  auto it = std::upper_bound(maps.begin(), maps.end(), std::make_pair(start, ~std::uint64_t{0}));
  return it != maps.begin() && std::prev(it)->first <= start && std::prev(it)->second >= end;
}

// With g_pinned.mu held, and no device write under way (the gate is closed, or the range is new).
void arm(PinnedRange& r, const std::vector<std::pair<std::uint64_t, std::uint64_t>>& maps) {
  if (!covered(maps, r.start & ~(page_bytes() - 1), r.end)) {
    disarm(r);
    return;
  }
  for (std::uint64_t w = 0; w < (r.pages + 63) / 64; ++w)
    r.done[w].store(0, std::memory_order_relaxed);
  r.pages_left.store(r.pages, std::memory_order_relaxed);
  if (r.start < g_armed_lo.load(std::memory_order_relaxed))
    g_armed_lo.store(r.start, std::memory_order_relaxed);
  if (r.end > g_armed_hi.load(std::memory_order_relaxed))
    g_armed_hi.store(r.end, std::memory_order_relaxed);
  if (!r.armed.exchange(true, std::memory_order_acq_rel))
    g_pinned_armed.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace

void pinned_before_write(std::uint64_t addr, std::uint64_t bytes) noexcept {
  if (addr + std::max<std::uint64_t>(bytes, 1) <= g_armed_lo.load(std::memory_order_relaxed) ||
      addr >= g_armed_hi.load(std::memory_order_relaxed))
    return;
  ReadTable t;
  if (!t) return;
  const auto& v = t->by_start;
  auto it = std::upper_bound(v.begin(), v.end(), addr,
                             [](std::uint64_t a, const PinnedRange* r) { return a < r->start; });
  if (it != v.begin() && (*std::prev(it))->end > addr) --it;
  if (bytes == 0) {
    if (it != v.end() && (*it)->start <= addr) write_pages(**it, (*it)->start, (*it)->end);
    return;
  }
  const std::uint64_t end = addr + bytes;
  for (; it != v.end() && (*it)->start < end; ++it) write_pages(**it, addr, end);
}

void pinned_before_write_all() noexcept {
  ReadTable t;
  if (!t) return;
  for (PinnedRange* r : t->by_start) write_pages(*r, r->start, r->end);
}

void pinned_add(std::uint64_t address, std::uint64_t bytes) {
  if (bytes == 0) return;
  MutexLock lock(g_pinned.mu);
  auto r = std::make_unique<PinnedRange>();
  r->start = address;
  r->end = address + bytes;
  const std::uint64_t page = page_bytes();
  r->pages = ((r->end + page - 1) & ~(page - 1)) / page - r->start / page;
  r->done = std::make_unique<std::atomic<std::uint64_t>[]>((r->pages + 63) / 64);
  // Memory registered now may have been host memory at the last cut, so protected since.
  if (g_pinned.cut_incarnation && g_pinned.cut_incarnation == incarnation() &&
      !g_pinned_unseen.load(std::memory_order_relaxed))
    arm(*r, writable_mappings());
  g_pinned.ranges.push_back(std::move(r));
  publish();
}

void pinned_remove(std::uint64_t address) {
  MutexLock lock(g_pinned.mu);
  std::vector<std::unique_ptr<PinnedRange>> retired;
  for (auto it = g_pinned.ranges.begin(); it != g_pinned.ranges.end();) {
    if ((*it)->start == address) {
      disarm(**it);
      retired.push_back(std::move(*it));
      it = g_pinned.ranges.erase(it);
    } else {
      ++it;
    }
  }
  if (!retired.empty()) publish(std::move(retired));
}

void pinned_arm() noexcept {
  MutexLock lock(g_pinned.mu);
  g_pinned.cut_incarnation = incarnation();
  // Device writes gcr cannot see have run: gcrd gives pinned memory the 1.4 care instead.
  if (g_pinned.ranges.empty() || g_pinned_unseen.load(std::memory_order_relaxed)) return;
  auto maps = writable_mappings();
  for (const auto& r : g_pinned.ranges) arm(*r, maps);
}

void pinned_check_incarnation() noexcept {
  MutexLock lock(g_pinned.mu);
  if (g_pinned.cut_incarnation == incarnation()) return;
  g_pinned.cut_incarnation = 0;
  for (const auto& r : g_pinned.ranges) disarm(*r);
}

void pinned_unseen_write() noexcept {
  g_pinned_unseen.store(true, std::memory_order_relaxed);
  if (g_pinned_armed.load(std::memory_order_relaxed) != 0) pinned_before_write_all();
}

bool pinned_writes_seen() noexcept {
  return !g_pinned_unseen.load(std::memory_order_relaxed);
}

}  // namespace gcr::interpose
