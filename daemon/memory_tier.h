// Checkpoints of other hosts' job parts kept in this host's memory (issue 37's second tier).
//
// Note [Checkpoints in peers' memory]
// A job's checkpoint is first committed on each host, in that host's store: a host lost takes its
// part with it. So once the job's checkpoint is committed, the coordinator has each part copied
// into the memory of m other hosts of the job (`--peer-copies m`), where a restore on a
// replacement host finds it (Note [A job across hosts] in job_link.h).
// - The memory tier of a gcrd is a store on a memory file system (tmpfs: /dev/shm by default,
//   `gcr daemon --peer-memory SIZE [--peer-memory-dir DIR]`), so a copy is as fast to read as
//   memory and costs no disk. It is served to other hosts as gcrd-net's `memory` store (read by a
//   restore) and filled only by this gcrd: a copy is *pulled* (request verb `tier`, op keep) from
//   the part's host, so the host that pays the memory decides what it admits. (The `from` of a
//   request is any gcrd the request's key reaches: its holder may already write and restore here,
//   Note [Network trust] in gcrd-net/net_store.h. Served to hosts of the shared token only.)
// - Placement (the job's hosts in the order of the manifest's parts, the coordinator first, n of
//   them): host i's part is copied to hosts i+1, ..., i+m (mod n), m < n. Each part is then held
//   by m+1 distinct hosts (its own and m others), so any m hosts lost leave a copy of every part:
//   a part is lost only if all of its m+1 holders are. Gemini's groups give the same guarantee for
//   m failures and fewer losses beyond; the ring needs no group count dividing n and moves each
//   host's bytes to exactly m peers.
// - Budget: the tier never holds more than SIZE bytes (file system blocks). A copy that would pass
//   it first evicts other copies, oldest first, except (per series: the job's checkpoint name and
//   its coordinator) those of the newest checkpoint whose every copy was made (the coordinator
//   says which, as `protect`) and the newest copy of each part: so a full tier never drops the
//   only copy of the newest complete checkpoint; if evicting what it may is not enough, the copy
//   is refused with the sizes. A series nothing was copied for in 10 minutes (its schedule ended,
//   a one-off checkpoint) protects nothing any more. It never takes memory the host's own work
//   needs: a copy is refused too when it would leave less than 10% of the host's memory
//   (MemAvailable) free.
// - Copies older than the series' oldest kept checkpoint (the schedule's --keep) are dropped as
//   newer ones arrive, as the checkpoints themselves are on their hosts.
// - Each copy is paced (--peer-copy-mib-per-s, default none) so that the job's own traffic keeps
//   its share of the link.
// - The tier outlives gcrd (tmpfs), not the host: its index (tier.index, one line a copy: id,
//   series, seq, origin) is read back when gcrd starts.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gcr/result.h"
#include "gcr/store.h"
#include "gcr/store_backend.h"

namespace gcr::gcrd {

struct MemoryTierOptions {
  std::filesystem::path root;
  std::uint64_t budget = 0;       // bytes
  std::uint64_t mib_per_s = 0;    // pace of a copy; 0: none
  unsigned reserve_percent = 10;  // of MemTotal, left MemAvailable after a copy
};

// One copy held: checkpoint `id`, the part of host `origin` in checkpoint `seq` of `series`.
struct TierCopy {
  store::CheckpointId id;
  std::string series, origin;
  std::uint64_t seq = 0;
};

struct KeepRequest {
  TierCopy copy;
  std::uint64_t protect = 0;  // the series' newest checkpoint whose every copy was made (0: none)
  std::uint64_t oldest = 0;   // copies of the series before this one are dropped
};

struct KeepReport {
  bool already_there = false;
  std::uint64_t copied_bytes = 0, logical_bytes = 0, elapsed_ns = 0;
  std::vector<TierCopy> evicted;
  std::uint64_t used = 0, budget = 0;
};

// Another store seen read only: what gcrd-net's `memory` sessions serve (the tier is filled only
// by its own gcrd, within its budget).
class ReadOnlyBackend final : public store::Backend {
 public:
  explicit ReadOnlyBackend(store::Backend& inner) : inner_(inner) {}
  const std::string& name() const override { return inner_.name(); }
  Result<std::vector<std::string>> list(const std::string& dir) override {
    return inner_.list(dir);
  }
  Result<store::DirListing> list_detailed(const std::string& dir) override {
    return inner_.list_detailed(dir);
  }
  Result<std::vector<std::byte>> get(const std::string& key, std::uint64_t max) override {
    return inner_.get(key, max);
  }
  Status get_range(const std::string& key, std::uint64_t offset,
                   std::span<std::byte> out) override {
    return inner_.get_range(key, offset, out);
  }
  Result<store::Versioned> get_versioned(const std::string& key, std::uint64_t max) override {
    return inner_.get_versioned(key, max);
  }
  Status put(const std::string&, std::span<const std::byte>, store::PutMode) override {
    return refused();
  }
  Status put_if(const std::string&, std::span<const std::byte>, const std::string&) override {
    return refused();
  }
  Status remove(const std::string&) override { return refused(); }
  unsigned parallelism() const override { return inner_.parallelism(); }

 private:
  static Error refused() {
    return Error{Errc::permission_denied, "a peer's memory is read only over the network"};
  }
  store::Backend& inner_;
};

class MemoryTier {
 public:
  static Result<std::unique_ptr<MemoryTier>> open(MemoryTierOptions options);

  // Pulls the copy from `from` (the part's host's store) within the budget (see the Note).
  Result<KeepReport> keep(store::Backend& from, const KeepRequest& req);

  std::vector<TierCopy> copies();
  std::uint64_t used();  // bytes the tier's files take now
  // The copy of the manifest of job `job_id` (a coordinator's part: META job_id, job_parts).
  std::optional<TierCopy> job_manifest(const std::string& job_id);
  Result<store::Manifest> manifest(const store::CheckpointId& id);
  const MemoryTierOptions& options() const { return options_; }

 private:
  explicit MemoryTier(MemoryTierOptions options) : options_(std::move(options)) {}
  Status save_index();             // under mu_
  Status drop(const TierCopy& c);  // under keep_mu_: its manifest (gc frees its chunks)
  bool evictable(const TierCopy& c, const TierCopy& incoming);  // under mu_
  Status make_room(const TierCopy& in, std::uint64_t& need, KeepReport& rep,
                   const std::function<Result<std::uint64_t>()>& need_now);  // under keep_mu_

  MemoryTierOptions options_;
  std::shared_ptr<store::Store> store_;
  std::mutex keep_mu_;            // one copy at a time (held across the pull and gc)
  std::mutex mu_;                 // copies_ and series_, held briefly
  std::vector<TierCopy> copies_;  // oldest first
  struct Series {
    std::uint64_t protect = 0;  // its protected checkpoint (0: none)
    std::chrono::steady_clock::time_point last_keep{};
  };
  std::map<std::string, Series> series_;
};

}  // namespace gcr::gcrd
