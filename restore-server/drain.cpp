// The drain of a checkpoint's device memory into the store (drain.h).
#include "drain.h"

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace gcr::gcrd {
namespace {

using namespace std::chrono_literals;

std::string hex(std::uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

// Host memory for one region at a time, reused across regions (grown when needed).
class Staging {
 public:
  ~Staging() {
    if (data_) munmap(data_, size_);
  }
  Result<std::span<std::byte>> get(std::uint64_t size) {
    if (size > size_) {
      if (data_) munmap(data_, size_);
      void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      data_ = p == MAP_FAILED ? nullptr : static_cast<std::byte*>(p);
      size_ = data_ ? size : 0;
      if (!data_)
        return Error{Errc::out_of_memory,
                     "no host memory to stage a region of " + std::to_string(size >> 20) + " MiB"};
    }
    return std::span<std::byte>(data_, size);
  }

 private:
  std::byte* data_ = nullptr;
  std::uint64_t size_ = 0;
};

Status read_into(Gpu& gpu, const MappedAllocation& src, std::span<std::byte> out) {
  GCR_TRY(gpu.use(src.device()));
  return src.read(0, out);
}

// The next entry to drain: one the process waits for, else the largest not yet done by gcrd.
// Largest first: a region the process writes before gcrd gets to it costs the process a copy of
// that region, cheap for a small one and dear (time, and device memory) for a large one.
std::optional<std::uint32_t> next_entry(const CowTable& t, const std::vector<bool>& finished) {
  std::optional<std::uint32_t> best;
  for (std::uint32_t i = 0; i < t.count(); ++i) {
    if (finished[i]) continue;
    if (t.entry(i).wanted.load(std::memory_order_acquire) &&
        t.entry(i).state.load(std::memory_order_acquire) == cow::kPending)
      return i;
    if (!best || t.entry(i).size > t.entry(*best).size) best = i;
  }
  return best;
}

// GCR_DRAIN_MIB_PER_S: an upper bound on the drain's pace, to leave disk bandwidth to the
// application (0 or unset: none).
std::uint64_t drain_rate_bytes_per_s() {
  const char* s = std::getenv("GCR_DRAIN_MIB_PER_S");
  if (!s || !*s) return 0;
  char* end = nullptr;
  unsigned long long mib = std::strtoull(s, &end, 10);
  return end && *end == 0 ? mib << 20 : 0;
}

}  // namespace

Result<CowTable> CowTable::create(std::span<const control::RegionRecord> regions) {
  if (regions.empty() || regions.size() > cow::kMaxEntries)
    return Error{Errc::invalid_argument,
                 "copy-on-write table of " + std::to_string(regions.size()) + " regions"};
  CowTable t;
  auto count = static_cast<std::uint32_t>(regions.size());
  t.bytes_ = cow::table_bytes(count);
  t.fd_ = UniqueFd(memfd_create("gcr-cow", MFD_CLOEXEC));
  if (!t.fd_) return errno_error("creating the copy-on-write table");
  if (ftruncate(t.fd_.get(), static_cast<off_t>(t.bytes_)) != 0)
    return errno_error("sizing the copy-on-write table");
  void* p = mmap(nullptr, t.bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, t.fd_.get(), 0);
  if (p == MAP_FAILED) return errno_error("mapping the copy-on-write table");
  t.header_ = static_cast<cow::TableHeader*>(p);
  t.header_->magic = cow::kTableMagic;
  t.header_->version = cow::kTableVersion;
  t.header_->count = count;
  t.header_->gcrd_pid = static_cast<std::uint32_t>(getpid());
  for (std::uint32_t i = 0; i < count; ++i) {
    cow::Entry& e = t.entry(i);
    e.address = regions[i].address;
    e.size = regions[i].size;
    e.device = regions[i].device;
    e.state.store(cow::kPending);
    e.wanted.store(0);
  }
  return t;
}

CowTable::CowTable(CowTable&& o) noexcept
    : fd_(std::move(o.fd_)), header_(std::exchange(o.header_, nullptr)), bytes_(o.bytes_) {}

CowTable::~CowTable() {
  if (header_) munmap(header_, bytes_);
}

Result<DrainStats> drain_regions(Gpu& gpu, store::CheckpointWriter& writer,
                                 std::span<const DrainRegion> regions, const CowTable* table,
                                 control::Client* client,
                                 const std::function<void(std::uint64_t)>& progress) {
  DrainStats stats;
  Staging staging;
  std::uint64_t done_bytes = 0;
  const std::uint64_t rate = drain_rate_bytes_per_s();
  const auto started = std::chrono::steady_clock::now();
  auto store = [&](const control::RegionRecord& r, std::span<const std::byte> bytes) -> Status {
    GCR_TRY(writer.add_region(r.address, bytes, r.device, true)
                .context("storing region " + hex(r.address)));
    done_bytes += r.size;
    if (progress) progress(done_bytes);
    return ok();
  };

  // Keeps to the rate limit, but never keeps the process waiting: a wanted entry goes at once.
  auto pace = [&] {
    if (!rate) return;
    auto due = started + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                             std::chrono::duration<double>(static_cast<double>(done_bytes) / rate));
    while (std::chrono::steady_clock::now() < due) {
      if (table)
        for (std::uint32_t i = 0; i < table->count(); ++i)
          if (table->entry(i).wanted.load(std::memory_order_acquire) &&
              table->entry(i).state.load(std::memory_order_acquire) == cow::kPending)
            return;
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
          10ms, due - std::chrono::steady_clock::now()));
    }
  };

  if (!table) {
    for (const DrainRegion& d : regions) {
      pace();
      GCR_TRY_ASSIGN(std::span<std::byte> buf, staging.get(d.region.size));
      GCR_TRY(read_into(gpu, *d.original, buf).context("reading region " + hex(d.region.address)));
      GCR_TRY(store(d.region, buf));
      ++stats.read_original;
    }
    return stats;
  }

  if (table->count() != regions.size())
    return Error{Errc::internal, "the copy-on-write table does not match the regions"};
  std::vector<bool> finished(regions.size(), false);
  for (;;) {
    pace();
    auto next = next_entry(*table, finished);
    if (!next) break;
    std::uint32_t i = *next;
    const DrainRegion& d = regions[i];
    cow::Entry& e = table->entry(i);
    GCR_TRY_ASSIGN(std::span<std::byte> buf, staging.get(d.region.size));
    std::uint32_t s = cow::kPending;
    if (e.state.compare_exchange_strong(s, cow::kReading, std::memory_order_acq_rel)) {
      // The process writes this region only after we say done: the original is the cut's.
      if (e.wanted.load()) ++stats.wanted;
      Status read = read_into(gpu, *d.original, buf);
      e.state.store(cow::kDone, std::memory_order_release);
      cow::futex_wake_all(&e.state);
      GCR_TRY(std::move(read).context("reading region " + hex(d.region.address)));
      ++stats.read_original;
    } else {
      // The process got there first: wait for its copy, then take it.
      auto waited_since = std::chrono::steady_clock::now();
      while ((s = e.state.load(std::memory_order_acquire)) == cow::kCopying) {
        cow::futex_wait(&e.state, s, 100ms);
        if (std::chrono::steady_clock::now() - waited_since > 60s)
          return Error{Errc::timeout, "the process did not finish copying region " +
                                          hex(d.region.address) + " within 60 s"};
      }
      if (s == cow::kPending) continue;  // its copy failed; it wants us to read it: loop again
      if (s != cow::kCopied)
        return Error{Errc::internal, "region " + hex(d.region.address) +
                                         " is in copy-on-write state " + std::to_string(s)};
      GCR_TRY_ASSIGN(control::CowCopy copy,
                     client->cow_take(i).context("taking the process's copy of region " +
                                                 hex(d.region.address)));
      if (copy.size != d.region.size)
        return Error{Errc::protocol, "the process's copy of region " + hex(d.region.address) +
                                         " has " + std::to_string(copy.size) + " bytes"};
      GCR_TRY_ASSIGN(MappedAllocation mapped, MappedAllocation::import(copy.fd.get(), copy.size));
      GCR_TRY(read_into(gpu, mapped, buf)
                  .context("reading the copy of region " + hex(d.region.address)));
      e.state.store(cow::kDone, std::memory_order_release);
      ++stats.took_copy;
    }
    finished[i] = true;
    GCR_TRY(store(d.region, buf));
  }
  return stats;
}

}  // namespace gcr::gcrd
