// Ingest: see ingest.h.
#include "store/ingest.h"

#include "store/compress.h"
#include "store/hash.h"

namespace gcr::store {
namespace {

// A batch is what is hashed (and then compressed) in one parallel step: large enough to keep
// every worker busy, small enough to bound compressed buffers waiting for the disk.
constexpr std::size_t kBatchChunks = 64;
constexpr std::uint64_t kBatchBytes = 64ull << 20;

struct Work {
  std::span<const std::byte> raw;
  ChunkId id;
  bool zero = false;
  DedupClass dedup = DedupClass::fresh;
  Packed packed;
};

}  // namespace

Ingest::Ingest(StoreState& state, io::IoQueue& io, std::unordered_set<ChunkId, Id128Hash> lineage)
    : state_(state), io_(io), lineage_(std::move(lineage)) {}

Status Ingest::status() const {
  for (const auto& p : packs_) GCR_TRY(p->status());
  return ok();
}

Result<PackWriter*> Ingest::pack_for_next_record() {
  if (packs_.empty() || packs_.back()->end() >= state_.options.pack_target_bytes) {
    GCR_TRY_ASSIGN(auto pack, PackWriter::create(state_.layout));
    packs_.push_back(std::move(pack));
  }
  return packs_.back().get();
}

Status Ingest::add(std::span<const std::byte> data, std::span<const std::uint32_t> sizes,
                   std::vector<ChunkRef>& refs, std::size_t& in_flight) {
  std::vector<Work> work;
  std::vector<std::size_t> fresh;
  std::size_t next = 0;
  std::uint64_t at = 0;
  while (next < sizes.size()) {
    work.clear();
    std::uint64_t batch_bytes = 0;
    while (next < sizes.size() && work.size() < kBatchChunks &&
           (work.empty() || batch_bytes + sizes[next] <= kBatchBytes)) {
      Work w;
      w.raw = data.subspan(at, sizes[next]);
      work.push_back(std::move(w));
      at += sizes[next];
      batch_bytes += sizes[next];
      ++next;
    }

    state_.pool.parallel_for(work.size(), [&](std::size_t i) {
      Work& w = work[i];
      w.zero = all_zero(w.raw);
      w.id = w.zero ? zero_chunk_id(static_cast<std::uint32_t>(w.raw.size())) : chunk_id_of(w.raw);
    });

    // Serial, in order: the first of two equal chunks is the one written.
    fresh.clear();
    for (std::size_t i = 0; i < work.size(); ++i) {
      Work& w = work[i];
      if (w.zero) {
        w.dedup = DedupClass::zero;
      } else if (!seen_.insert(w.id).second) {
        w.dedup = DedupClass::self;
      } else if (lineage_.contains(w.id)) {
        w.dedup = DedupClass::lineage;
      } else if (state_.catalog.contains(w.id)) {
        w.dedup = DedupClass::other;
      } else {
        w.dedup = DedupClass::fresh;
        fresh.push_back(i);
      }
    }

    int level = state_.options.zstd_level;
    state_.pool.parallel_for(fresh.size(), [&](std::size_t k) {
      Work& w = work[fresh[k]];
      w.packed = pack_chunk(w.raw, level);
    });

    for (Work& w : work) {
      auto raw_bytes = static_cast<std::uint32_t>(w.raw.size());
      counters_.bytes[static_cast<int>(w.dedup)] += raw_bytes;
      ++counters_.chunks;
      refs.push_back(ChunkRef{w.id, raw_bytes, w.zero, w.dedup});
      if (w.dedup != DedupClass::fresh) continue;
      counters_.probe_bytes += w.packed.probe_bytes;
      counters_.compress_bytes += w.packed.compress_bytes;
      GCR_TRY_ASSIGN(PackWriter * pack, pack_for_next_record());
      std::span<const std::byte> payload = w.raw;
      std::shared_ptr<std::vector<std::byte>> owned;
      if (w.packed.codec == Codec::zstd) {
        owned = std::make_shared<std::vector<std::byte>>(std::move(w.packed.bytes));
        payload = *owned;
      }
      ++in_flight;
      GCR_TRY_ASSIGN(IndexEntry e, pack->append(io_, w.id, w.packed.codec, raw_bytes, payload,
                                                [owned, &in_flight](int) { --in_flight; }));
      ++counters_.new_chunks;
      counters_.stored_bytes += e.stored_bytes;
      counters_.record_bytes += e.record_bytes();
    }
  }
  return ok();
}

Result<ChunkRef> Ingest::reuse(const ChunkRef& parent_ref) {
  ChunkRef r = parent_ref;
  if (r.zero) {
    r.dedup = DedupClass::zero;
  } else {
    if (!state_.catalog.contains(r.id)) {
      return make_error(Errc::corrupt_image,
                        "the parent checkpoint names chunk " + r.id.hex() +
                            ", which no sealed pack holds; run 'gcr image verify' on the parent");
    }
    r.dedup = seen_.insert(r.id).second ? DedupClass::lineage : DedupClass::self;
  }
  counters_.bytes[static_cast<int>(r.dedup)] += r.raw_bytes;
  ++counters_.chunks;
  return r;
}

}  // namespace gcr::store
