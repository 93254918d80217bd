// The drain of a checkpoint's device memory into the store (drain.h).
#include "drain.h"

#include "hex_address.h"
#include "pace.h"
#include "staging.h"

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace gcr::gcrd {
namespace {

using namespace std::chrono_literals;

Status read_into(const HeldMemory& src, std::span<std::byte> out) {
  return src.read(0, out);
}

// Stores region r straight from the device, a piece at a time: host memory for one piece only.
Status store_streamed(store::CheckpointWriter& writer, const control::RegionRecord& r,
                      const HeldMemory& src) {
  return writer.add_region_streamed(
      r.address, r.size, r.device, true,
      [&](std::uint64_t off, std::span<std::byte> out) -> Status { return src.read(off, out); });
}

// The next entry to drain: one the process waits for, else the largest not yet done by gcrd.
// Largest first: a region the process writes before gcrd gets to it costs the process a copy of
// that region, cheap for a small one and dear (time, and device memory) for a large one.
std::optional<std::uint32_t> next_entry(const CowTable& t, const std::vector<bool>& finished) {
  std::optional<std::uint32_t> best;
  for (std::uint32_t i = 0; i < finished.size(); ++i) {  // the table's first entries
    if (finished[i]) continue;
    if (t.entry(i).wanted.load(std::memory_order_acquire) &&
        t.entry(i).state.load(std::memory_order_acquire) == cow::kPending)
      return i;
    if (!best || t.size(i) > t.size(*best)) best = i;
  }
  return best;
}

}  // namespace

Result<DrainStats> drain_regions(store::CheckpointWriter& writer,
                                 std::span<const DrainRegion> regions, const CowTable* table,
                                 const TakeCopy& take_copy,
                                 const std::function<void(std::uint64_t)>& progress,
                                 const std::function<bool()>& gone) {
  DrainStats stats;
  Staging staging;
  std::uint64_t done_bytes = 0;
  const Pace pacer("GCR_DRAIN_MIB_PER_S");
  auto stored = [&](const control::RegionRecord& r) {
    done_bytes += r.size;
    if (progress) progress(done_bytes);
  };
  // From host memory: the region was read whole first (so that the process could go on).
  auto store_staged = [&](const control::RegionRecord& r, std::span<const std::byte> bytes) {
    Status s = writer.add_region(r.address, bytes, r.device, true);
    if (s) stored(r);
    return std::move(s).context("storing region " + hex_address(r.address));
  };
  auto stream = [&](const control::RegionRecord& r, const HeldMemory& src) {
    Status s = store_streamed(writer, r, src);
    if (s) stored(r);
    return std::move(s).context("storing region " + hex_address(r.address));
  };

  // Never keeps the process waiting for the pace: a wanted entry goes at once.
  auto pace = [&] { pacer.wait(done_bytes, [&] { return table && any_wanted(*table); }); };

  if (!table) {  // the process is stopped: nothing writes the originals
    for (const DrainRegion& d : regions) {
      pace();
      writer.set_region_owner(d.owner);
      GCR_TRY(stream(d.region, *d.original));
      ++stats.read_original;
    }
    return stats;
  }

  if (table->count() < regions.size())  // after them: shared views (drain_shared's)
    return Error{Errc::internal, "the copy-on-write table does not match the regions"};
  std::vector<bool> finished(regions.size(), false);
  for (;;) {
    pace();
    auto next = next_entry(*table, finished);
    if (!next) break;
    std::uint32_t i = *next;
    const DrainRegion& d = regions[i];
    writer.set_region_owner(d.owner);
    cow::Entry& e = table->entry(i);
    std::uint32_t s = cow::kPending;
    if (e.state.compare_exchange_strong(s, cow::kReading, std::memory_order_acq_rel)) {
      // The process writes this region only after we say done: the original is the cut's.
      if (e.wanted.load()) ++stats.wanted;
      auto release = [&] {
        e.state.store(cow::kDone, std::memory_order_release);
        cow::futex_wake_all(&e.state);
      };
      if (d.region.size <= kStageWholeBytes) {
        // Read it whole, let the process have it, then store it from host memory.
        auto buf = staging.get(d.region.size);
        Status read = buf ? read_into(*d.original, *buf) : Status(buf.error());
        release();
        GCR_TRY(std::move(read).context("reading region " + hex_address(d.region.address)));
        GCR_TRY(store_staged(d.region, *buf));
      } else {
        // Too large to stage: the process waits for this one if it writes it meanwhile.
        Status st = stream(d.region, *d.original);
        release();
        GCR_TRY(std::move(st));
      }
      ++stats.read_original;
    } else {
      // The process got there first: wait for its copy, then take it.
      auto waited_since = std::chrono::steady_clock::now();
      bool died_copying = false;
      while ((s = e.state.load(std::memory_order_acquire)) == cow::kCopying) {
        cow::futex_wait(&e.state, s, 100ms);
        if (e.state.load(std::memory_order_acquire) == cow::kCopying && gone && gone()) {
          died_copying = true;
          break;
        }
        if (std::chrono::steady_clock::now() - waited_since > 60s)
          return Error{Errc::timeout, "the process did not finish copying region " +
                                          hex_address(d.region.address) + " within 60 s"};
      }
      if (died_copying) {  // it never wrote the original
        GCR_TRY(stream(d.region, *d.original));
        e.state.store(cow::kDone, std::memory_order_release);
        ++stats.read_original;
        finished[i] = true;
        continue;
      }
      if (s == cow::kPending) continue;  // its copy failed; it wants us to read it: loop again
      if (s != cow::kCopied)
        return Error{Errc::internal, "region " + hex_address(d.region.address) +
                                         " is in copy-on-write state " + std::to_string(s)};
      GCR_TRY_ASSIGN(
          std::unique_ptr<HeldMemory> copy,
          take_copy(i, d.region.size)
              .context("taking the process's copy of region " + hex_address(d.region.address)));
      if (copy->size() != d.region.size)
        return Error{Errc::protocol, "the process's copy of region " +
                                         hex_address(d.region.address) + " has " +
                                         std::to_string(copy->size()) + " bytes"};
      e.state.store(cow::kDone, std::memory_order_release);
      GCR_TRY(stream(d.region, *copy));  // nothing writes the copy
      ++stats.took_copy;
    }
    finished[i] = true;
  }
  return stats;
}

Result<DrainStats> drain_shared(store::CheckpointWriter& writer,
                                std::span<const SharedDrain> shared,
                                const std::function<void(std::uint64_t)>& progress) {
  DrainStats stats;
  Staging staging;
  std::uint64_t done_bytes = 0;
  auto waited_for = [](const SharedDrain& s) {
    for (const cow::Entry* e : s.views)
      if (e->wanted.load(std::memory_order_acquire)) return true;
    return false;
  };
  std::vector<bool> finished(shared.size(), false);
  for (std::size_t left = shared.size(); left > 0; --left) {
    // One a member waits for first, else the next in order.
    std::size_t k = shared.size();
    for (std::size_t i = 0; i < shared.size() && k == shared.size(); ++i)
      if (!finished[i] && waited_for(shared[i])) k = i;
    for (std::size_t i = 0; i < shared.size() && k == shared.size(); ++i)
      if (!finished[i]) k = i;
    finished[k] = true;
    const SharedDrain& s = shared[k];
    const DrainRegion& d = s.stored;
    auto release = [&] {
      stats.wanted += waited_for(s);
      for (cow::Entry* e : s.views) {
        e->state.store(cow::kDone, std::memory_order_release);
        cow::futex_wake_all(&e->state);
      }
    };
    writer.set_region_owner(d.owner);
    const std::string what = "storing shared region " + hex_address(d.region.address);
    if (d.region.size <= kStageWholeBytes) {
      auto buf = staging.get(d.region.size);
      Status read = buf ? read_into(*d.original, *buf) : Status(buf.error());
      GCR_TRY(std::move(read).context(what));
      release();
      GCR_TRY(writer.add_region(d.region.address, *buf, d.region.device, true).context(what));
    } else {
      GCR_TRY(store_streamed(writer, d.region, *d.original).context(what));
      release();
    }
    ++stats.read_original;
    done_bytes += d.region.size;
    if (progress) progress(done_bytes);
  }
  return stats;
}

}  // namespace gcr::gcrd
