// The drain of a checkpoint's device memory into the store (drain.h).
#include "drain.h"

#include "gcr/settings.h"
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

// One drain_regions() call: the regions, the table that guards them while the process runs, and
// what has been stored.
class RegionDrain {
 public:
  RegionDrain(store::CheckpointWriter& writer, const CowTable* table, const TakeCopy& take_copy,
              const std::function<void(std::uint64_t)>& progress, const std::function<bool()>& gone)
      : writer_(writer),
        table_(table),
        take_copy_(take_copy),
        progress_(progress),
        gone_(gone),
        pacer_(settings().drain_mib_per_s) {}

  // The process is stopped: nothing writes the originals.
  Status stopped(std::span<const DrainRegion> regions) {
    for (const DrainRegion& d : regions) {
      pace();
      writer_.set_region_owner(d.owner);
      GCR_TRY(stream(d.region, *d.original));
      ++stats_.read_original;
    }
    return ok();
  }

  // The process runs: each entry is claimed, or its copy taken; wanted ones first.
  Status running(std::span<const DrainRegion> regions) {
    if (table_->count() < regions.size())  // after them: shared views (drain_shared's)
      return Error{Errc::internal, "the copy-on-write table does not match the regions"};
    std::vector<bool> finished(regions.size(), false);
    for (;;) {
      pace();
      auto next = next_entry(*table_, finished);
      if (!next) return ok();
      const DrainRegion& d = regions[*next];
      writer_.set_region_owner(d.owner);
      cow::Entry& e = table_->entry(*next);
      std::uint32_t s = cow::kPending;
      if (e.state.compare_exchange_strong(s, cow::kReading, std::memory_order_acq_rel)) {
        GCR_TRY(read_claimed(d, e));
      } else {
        GCR_TRY_ASSIGN(bool done, take_copied(d, e, *next));
        if (!done) continue;  // its copy failed; it wants us to read it: loop again
      }
      finished[*next] = true;
    }
  }

  const DrainStats& stats() const { return stats_; }

 private:
  void stored(const control::RegionRecord& r) {
    done_bytes_ += r.size;
    if (progress_) progress_(done_bytes_);
  }
  Status stream(const control::RegionRecord& r, const HeldMemory& src) {
    Status s = store_streamed(writer_, r, src);
    if (s) stored(r);
    return std::move(s).context("storing region " + hex_address(r.address));
  }
  // Never keeps the process waiting for the pace: a wanted entry goes at once.
  void pace() {
    pacer_.wait(done_bytes_, [&] { return table_ && any_wanted(*table_); });
  }

  // The entry is ours (`reading`): the process writes this region only after we say done, so the
  // original is the cut's.
  Status read_claimed(const DrainRegion& d, cow::Entry& e) {
    if (e.wanted.load()) ++stats_.wanted;
    auto release = [&] {
      e.state.store(cow::kDone, std::memory_order_release);
      cow::futex_wake_all(&e.state);
    };
    ++stats_.read_original;
    if (d.region.size > kStageWholeBytes) {
      // Too large to stage: the process waits for this one if it writes it meanwhile.
      Status st = stream(d.region, *d.original);
      release();
      return st;
    }
    // Read it whole, let the process have it, then store it from host memory.
    auto buf = staging_.get(d.region.size);
    Status read = buf ? read_into(*d.original, *buf) : Status(buf.error());
    release();
    GCR_TRY(std::move(read).context("reading region " + hex_address(d.region.address)));
    Status s = writer_.add_region(d.region.address, *buf, d.region.device, true);
    if (s) stored(d.region);
    return std::move(s).context("storing region " + hex_address(d.region.address));
  }

  // The process got there first: waits for its copy, then takes it; false when its copy failed
  // (the entry is pending again). A process that died copying never wrote the original: it is
  // read (Note [Copies handed over] in gcr/cow_table.h).
  Result<bool> take_copied(const DrainRegion& d, cow::Entry& e, std::uint32_t index) {
    auto waited_since = std::chrono::steady_clock::now();
    std::uint32_t s;
    while ((s = e.state.load(std::memory_order_acquire)) == cow::kCopying) {
      cow::futex_wait(&e.state, s, 100ms);
      if (e.state.load(std::memory_order_acquire) == cow::kCopying && gone_ && gone_()) {
        GCR_TRY(stream(d.region, *d.original));
        e.state.store(cow::kDone, std::memory_order_release);
        ++stats_.read_original;
        return true;
      }
      if (std::chrono::steady_clock::now() - waited_since > 60s)
        return Error{Errc::timeout, "the process did not finish copying region " +
                                        hex_address(d.region.address) + " within 60 s"};
    }
    if (s == cow::kPending) return false;
    if (s != cow::kCopied)
      return Error{Errc::internal, "region " + hex_address(d.region.address) +
                                       " is in copy-on-write state " + std::to_string(s)};
    GCR_TRY_ASSIGN(
        std::unique_ptr<HeldMemory> copy,
        take_copy_(index, d.region.size)
            .context("taking the process's copy of region " + hex_address(d.region.address)));
    if (copy->size() != d.region.size)
      return Error{Errc::protocol, "the process's copy of region " + hex_address(d.region.address) +
                                       " has " + std::to_string(copy->size()) + " bytes"};
    e.state.store(cow::kDone, std::memory_order_release);
    GCR_TRY(stream(d.region, *copy));  // nothing writes the copy
    ++stats_.took_copy;
    return true;
  }

  store::CheckpointWriter& writer_;
  const CowTable* table_;
  const TakeCopy& take_copy_;
  const std::function<void(std::uint64_t)>& progress_;
  const std::function<bool()>& gone_;
  const Pace pacer_;
  Staging staging_;
  DrainStats stats_;
  std::uint64_t done_bytes_ = 0;
};

}  // namespace

Result<DrainStats> drain_regions(store::CheckpointWriter& writer,
                                 std::span<const DrainRegion> regions, const CowTable* table,
                                 const TakeCopy& take_copy,
                                 const std::function<void(std::uint64_t)>& progress,
                                 const std::function<bool()>& gone) {
  RegionDrain drain(writer, table, take_copy, progress, gone);
  GCR_TRY(table ? drain.running(regions) : drain.stopped(regions));
  return drain.stats();
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
