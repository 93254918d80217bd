// Note [Checkpoints in peers' memory] (memory_tier.h).
#include "memory_tier.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <sstream>

#include "gcr/human_output.h"
#include "gcr/private_dir.h"
#include "gcr/store_transfer.h"
#include "pace.h"

namespace gcr::gcrd {

namespace fs = std::filesystem;

namespace {

constexpr const char* kIndex = "tier.index";

std::uint64_t meminfo(const std::string& field) {  // kB -> bytes; 0 when unknown
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with(field + ":"))
      return std::strtoull(line.c_str() + field.size() + 1, nullptr, 10) << 10;
  return 0;
}

std::string describe(const TierCopy& c) {
  return c.series + "." + std::to_string(c.seq) + " of " + c.origin + " (" +
         c.id.hex().substr(0, 12) + ")";
}

}  // namespace

Result<std::unique_ptr<MemoryTier>> MemoryTier::open(MemoryTierOptions options) {
  // Other users' copies of jobs' memory: a directory only gcrd's user can reach (on /dev/shm,
  // anyone could have made it first).
  GCR_TRY_ASSIGN(UniqueFd dir,
                 io::open_private_dir(options.root, true).context("--peer-memory-dir"));
  std::unique_ptr<MemoryTier> tier(new MemoryTier(std::move(options)));
  store::StoreOptions so;
  so.root = tier->options_.root / "store";
  so.use_io_uring = false;  // a memory file system: plain copies
  auto st = store::Store::open(so, true);
  if (!st) return std::move(st).context("the peer memory tier").error();
  tier->store_ = std::move(st).value();
  // The index of a gcrd before this one (Note: the tier outlives gcrd); copies whose manifest is
  // gone are forgotten.
  std::ifstream in(tier->options_.root / kIndex);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string id;
    TierCopy c;
    if (!(f >> id >> c.series >> c.seq >> c.origin)) continue;
    auto cid = store::CheckpointId::from_hex(id);
    if (!cid || !tier->store_->read_manifest(*cid)) continue;
    c.id = *cid;
    tier->copies_.push_back(std::move(c));
  }
  // A copy committed but not yet in the index (gcrd ended in between) could never be evicted.
  if (auto listed = tier->store_->list()) {
    bool removed = false;
    for (const store::CheckpointInfo& c : *listed)
      if (std::none_of(tier->copies_.begin(), tier->copies_.end(),
                       [&](const TierCopy& k) { return k.id == c.id; }))
        removed = tier->store_->remove(c.id).has_value() || removed;
    if (removed) (void)tier->store_->gc();
  }
  return tier;
}

std::uint64_t MemoryTier::used() {
  std::uint64_t bytes = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(options_.root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode))
      bytes += static_cast<std::uint64_t>(st.st_blocks) * 512;
  }
  return bytes;
}

std::optional<TierCopy> MemoryTier::job_manifest(const std::string& job_id) {
  std::lock_guard lock(mu_);
  for (auto it = copies_.rbegin(); it != copies_.rend(); ++it) {
    auto m = store_->read_manifest(it->id);
    if (m && m->meta_or("job_id") == job_id && !m->meta_or("job_parts").empty()) return *it;
  }
  return std::nullopt;
}

Result<store::Manifest> MemoryTier::manifest(const store::CheckpointId& id) {
  return store_->read_manifest(id);
}

std::vector<TierCopy> MemoryTier::copies() {
  std::lock_guard lock(mu_);
  return copies_;
}

Status MemoryTier::save_index() {
  std::string text;
  for (const TierCopy& c : copies_)
    text += c.id.hex() + " " + c.series + " " + std::to_string(c.seq) + " " + c.origin + "\n";
  const fs::path tmp = options_.root / (std::string(kIndex) + ".new");
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out) return Error{Errc::io_error, "writing " + tmp.string()};
  }
  std::error_code ec;
  fs::rename(tmp, options_.root / kIndex, ec);
  if (ec) return Error{Errc::io_error, "writing the tier's index: " + ec.message()};
  return ok();
}

Status MemoryTier::drop(const TierCopy& c) {
  Status s = store_->remove(c.id);
  if (!s && s.error().code != Errc::not_found) return s;
  std::lock_guard lock(mu_);
  std::erase_if(copies_, [&](const TierCopy& k) { return k.id == c.id && k.origin == c.origin; });
  return save_index();
}

bool MemoryTier::evictable(const TierCopy& c, const TierCopy& in) {
  if (c.id == in.id) return false;
  auto series = series_.find(c.series);
  const bool live =
      series != series_.end() &&
      std::chrono::steady_clock::now() - series->second.last_keep < std::chrono::minutes(10);
  if (!live) return true;  // nothing copied for it in 10 minutes: it protects nothing any more
  if (series->second.protect && c.seq == series->second.protect) return false;
  return std::any_of(copies_.begin(), copies_.end(), [&](const TierCopy& k) {
    return k.series == c.series && k.origin == c.origin && k.seq > c.seq;
  });
}

// Evicts what it may (evictable()) until `need` more bytes fit the budget, or says why not.
Status MemoryTier::make_room(const TierCopy& in, std::uint64_t& need, KeepReport& rep,
                             const std::function<Result<std::uint64_t>()>& need_now) {
  for (bool collected = false;;) {
    rep.used = used();
    if (rep.used + need <= options_.budget) break;
    std::optional<TierCopy> victim;
    {
      std::lock_guard lock(mu_);
      for (const TierCopy& c : copies_)
        if (evictable(c, in)) {
          victim = c;
          break;
        }
    }
    if (!victim) {
      if (!collected) {  // what a failed copy left behind first
        (void)store_->gc();
        collected = true;
        continue;
      }
      return Error{Errc::no_space,
                   "this host's peer memory is full: a copy of " + describe(in) + " needs " +
                       format_bytes(need) + ", " + format_bytes(rep.used) + " of " +
                       format_bytes(options_.budget) +
                       " are taken by copies it may not evict (the newest of each part and "
                       "those of the newest complete checkpoint); give gcrd a larger "
                       "--peer-memory"};
    }
    GCR_TRY(drop(*victim));
    (void)store_->gc();  // its chunks nothing else holds
    rep.evicted.push_back(*victim);
    GCR_TRY_ASSIGN(need, need_now());  // gc may have freed chunks the copy shares
  }
  return ok();
}

Result<KeepReport> MemoryTier::keep(store::Backend& from, const KeepRequest& req) {
  std::lock_guard keeping(keep_mu_);
  KeepReport rep;
  rep.budget = options_.budget;
  const TierCopy& in = req.copy;
  std::vector<TierCopy> dropped;
  {
    std::lock_guard lock(mu_);
    Series& series = series_[in.series];
    series.last_keep = std::chrono::steady_clock::now();
    if (req.protect) series.protect = req.protect;
    // Older than what the series keeps: dropped whatever the budget, but for its protected one.
    for (const TierCopy& c : copies_)
      if (c.series == in.series && c.seq < req.oldest && c.seq != series.protect && c.id != in.id)
        dropped.push_back(c);
  }
  for (const TierCopy& c : dropped) GCR_TRY(drop(c));
  if (!dropped.empty()) (void)store_->gc();
  auto need_now = [&]() -> Result<std::uint64_t> {
    GCR_TRY_ASSIGN(auto local, store::open_dir_backend(store_->options().root, {}));
    return store::bytes_to_copy(from, *local, in.id);
  };
  GCR_TRY_ASSIGN(std::uint64_t need, need_now());
  // The host's own work first: checked before anything is evicted for a copy that cannot come.
  if (const std::uint64_t total = meminfo("MemTotal"); total && need) {
    const std::uint64_t available = meminfo("MemAvailable");
    const std::uint64_t reserve = total / 100 * options_.reserve_percent;
    if (available < need + reserve)
      return Error{Errc::no_space, "a copy of " + describe(in) + " (" + format_bytes(need) +
                                       ") would leave this host less than " +
                                       std::to_string(options_.reserve_percent) +
                                       "% of its memory free (" + format_bytes(available) +
                                       " available): refused, the host's own work comes first"};
  }
  GCR_TRY(make_room(in, need, rep, need_now));
  GCR_TRY_ASSIGN(auto local, store::open_dir_backend(store_->options().root, {}));
  store::TransferOptions t;
  Pace pace(options_.mib_per_s);
  if (options_.mib_per_s)
    t.progress = [&pace](std::uint64_t done, std::uint64_t) { pace.wait(done, nullptr); };
  auto r = store::copy_checkpoint(from, *local, in.id, t);
  local.reset();
  if (!r) {
    (void)store_->gc();  // the packs of a copy that did not finish
    return std::move(r).error();
  }
  rep.already_there = r->already_there;
  rep.copied_bytes = r->copied_bytes;
  rep.logical_bytes = r->logical_bytes;
  rep.elapsed_ns = r->elapsed_ns;
  {
    std::lock_guard lock(mu_);
    std::erase_if(copies_,
                  [&](const TierCopy& k) { return k.id == in.id && k.origin == in.origin; });
    copies_.push_back(in);
    GCR_TRY(save_index());
  }
  rep.used = used();
  return rep;
}

}  // namespace gcr::gcrd
