// Transfer: see gcr/store_transfer.h.
#include "gcr/store_transfer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "gcr/manifest.h"
#include "gcr/store.h"
#include "gcr/store_backend_list.h"
#include "gcr/store_workers.h"
#include "store/backend_chunks.h"
#include "store/compress.h"
#include "store/fault.h"
#include "store/layout.h"
#include "store/pack_format.h"

namespace gcr::store {
namespace {

// One destination pack: the ranges whose records it receives.
struct Batch {
  std::vector<RecordRange> ranges;
};

// in_order: the batches follow `wanted` as given (a stage); else it is sorted by place in the
// source, which makes the fewest, largest reads.
std::vector<Batch> plan_batches(std::vector<Located> wanted, const TransferOptions& o,
                                bool in_order) {
  if (!in_order) sort_by_place(wanted);
  std::vector<Batch> batches;
  std::uint64_t batch_bytes = 0;
  for (const Located& l : wanted) {
    std::uint64_t rec = l.entry.record_bytes();
    if (batches.empty() || batch_bytes + rec > o.pack_target_bytes) {
      if (batches.empty() || !batches.back().ranges.empty()) batches.emplace_back();
      batch_bytes = 0;
    }
    add_to_ranges(batches.back().ranges, l, o.max_range_bytes, o.max_range_gap_bytes);
    batch_bytes += rec;
  }
  return batches;
}

// Appends `bytes` to `parts`, extending the last part when `bytes` follows it in memory.
void append_part(std::vector<std::span<const std::byte>>& parts, std::span<const std::byte> bytes) {
  if (!parts.empty() && parts.back().data() + parts.back().size() == bytes.data())
    parts.back() = {parts.back().data(), parts.back().size() + bytes.size()};
  else
    parts.push_back(bytes);
}

// The buffers batches are read into, reused by the batches of one copy: fresh memory for every
// batch cost a pull as much in page faults as in copying. Not zeroed: every byte of a batch's
// buffer is read into before it is used.
class BatchBuffers {
 public:
  struct Buffer {
    std::unique_ptr<std::byte[]> bytes;
    std::size_t capacity = 0;
  };
  Buffer take(std::size_t bytes) {
    Buffer b;
    {
      std::lock_guard lock(mu_);
      if (!free_.empty()) {
        b = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (b.capacity < bytes) b = {std::unique_ptr<std::byte[]>(new std::byte[bytes]), bytes};
    return b;
  }
  void give_back(Buffer b) {
    std::lock_guard lock(mu_);
    free_.push_back(std::move(b));
  }

 private:
  std::mutex mu_;
  std::vector<Buffer> free_;
};

// Reads a batch's records from `from`, checks them, and writes them to `to` as one new pack
// (pack first, then its index: the pack is complete before anything can name it). The pack is
// written from the buffer the ranges arrived in, record by record where they are (their padding,
// when not zero, replaced by zeros). Returns the pack's size.
Result<std::uint64_t> copy_batch(Backend& from, Backend& to, const Batch& batch, PackId pack_id,
                                 BatchBuffers& buffers) {
  static constexpr std::byte kZeros[8] = {};
  PackIndex index;
  index.pack = pack_id;
  const auto header = encode_pack_header(index.pack);
  std::size_t total = 0;
  for (const RecordRange& r : batch.ranges) total += r.bytes;
  BatchBuffers::Buffer held = buffers.take(total);
  struct GiveBack {
    BatchBuffers& to;
    BatchBuffers::Buffer& b;
    ~GiveBack() { to.give_back(std::move(b)); }
  } give_back{buffers, held};
  std::span<std::byte> buffer(held.bytes.get(), total);
  std::vector<std::span<const std::byte>> parts{header};
  std::uint64_t pack_bytes = header.size();
  for (const RecordRange& r : batch.ranges) {
    std::span<std::byte> range = buffer.first(r.bytes);
    buffer = buffer.subspan(r.bytes);
    GCR_TRY(from.get_range(pack_key(r.pack), r.offset, range));
    std::string origin = "pack " + r.pack.hex() + " (" + from.name() + ")";
    for (const Located& l : r.records) {
      std::span<const std::byte> record = std::span<const std::byte>(range).subspan(
          l.entry.offset - r.offset, l.entry.record_bytes());
      GCR_TRY(check_record(record, l, origin));
      IndexEntry e = l.entry;
      e.offset = pack_bytes;
      const std::size_t used = kRecordHeaderBytes + e.stored_bytes;
      std::span<const std::byte> padding = record.subspan(used);
      if (std::all_of(padding.begin(), padding.end(),
                      [](std::byte b) { return b == std::byte{0}; })) {
        append_part(parts, record);
      } else {
        append_part(parts, record.first(used));
        parts.emplace_back(kZeros, padding.size());
      }
      pack_bytes += record.size();
      index.entries.push_back(e);
    }
  }
  index.pack_bytes = pack_bytes;
  GCR_TRY(to.put_parts(pack_key(index.pack), parts, PutMode::create_only));
  GCR_TRY(to.put(index_key(index.pack), encode_pack_index(index), PutMode::create_only));
  fault_point(Fault::transfer_after_pack);
  return pack_bytes;
}

// Copies chunks from the source into new destination packs, many packs at once, and records in
// `placed` where each went.
struct ChunkCopier {
  Backend& from;
  Backend& to;
  const TransferOptions& options;
  TransferReport& report;
  std::unordered_map<ChunkId, PackId, Id128Hash>& placed;

  Status copy(const std::vector<ChunkId>& chunks, const std::string& origin,
              std::optional<ChunkMap>& source, bool in_order = false) {
    if (chunks.empty()) return ok();
    if (!source) {
      GCR_TRY_ASSIGN(ChunkMap loaded, load_chunk_map(from, MarkedPacks::use));
      source = std::move(loaded);
    }
    std::vector<Located> wanted;
    for (const ChunkId& cid : chunks) {
      auto it = source->find(cid);
      if (it == source->end()) {
        return make_error(Errc::corrupt_image,
                          origin + ": chunk " + cid.hex() +
                              " is in no sealed pack there; run 'gcr image verify' on it");
      }
      wanted.push_back(it->second);
    }
    std::uint64_t total_raw = 0;
    for (const Located& l : wanted) total_raw += l.entry.raw_bytes;
    auto batches = plan_batches(std::move(wanted), options, in_order);
    std::vector<PackId> pack_ids(batches.size());
    for (PackId& p : pack_ids) p = PackId::random();
    std::vector<Result<std::uint64_t>> results(batches.size(), std::uint64_t{0});
    std::atomic<bool> failed{false};
    std::atomic<std::uint64_t> done_raw{0};
    if (options.progress) options.progress(0, total_raw);
    unsigned parallel = std::min(from.parallelism(), to.parallelism());
    BatchBuffers buffers;
    WorkerPool pool(std::min<unsigned>(parallel, std::max<std::size_t>(batches.size(), 1)));
    pool.parallel_for(batches.size(), [&](std::size_t i) {
      if (failed) return;  // one failure fails the transfer: do not start more
      if (options.cancel != nullptr && options.cancel->load()) {
        results[i] = Error{Errc::busy, "the transfer was cancelled"};
        failed = true;
        return;
      }
      results[i] = copy_batch(from, to, batches[i], pack_ids[i], buffers);
      if (!results[i]) {
        failed = true;
        return;
      }
      if (options.progress) {
        std::uint64_t raw = 0;
        for (const RecordRange& r : batches[i].ranges)
          for (const Located& l : r.records) raw += l.entry.raw_bytes;
        options.progress(done_raw += raw, total_raw);
      }
    });
    for (auto& r : results) {
      if (!r) return std::move(r).error();
      report.copied_bytes += *r;
    }
    for (std::size_t i = 0; i < batches.size(); ++i) {
      for (const RecordRange& r : batches[i].ranges)
        for (const Located& l : r.records) placed[l.entry.id] = pack_ids[i];
    }
    report.chunks_copied += chunks.size();
    report.packs_written += batches.size();
    return ok();
  }
};

std::string bytes_text(std::uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

// A tag is moved by compare-and-swap (a conditional PUT on a bucket): read with its version, then
// written only if still at that version, so two writers moving one tag at once each see the
// other's write (and retry) instead of one silently losing its update in between.
Status set_tag(Backend& to, const std::string& tag, std::span<const std::byte> text) {
  std::string key = "tags/" + tag;
  for (int attempt = 0;; ++attempt) {
    std::string version;
    auto now = to.get_versioned(key, 64);
    if (now) {
      if (std::equal(now->bytes.begin(), now->bytes.end(), text.begin(), text.end())) return ok();
      version = std::move(now->version);
    } else if (now.error().code != Errc::not_found) {
      return std::move(now).error();
    }
    Status s = to.put_if(key, text, version);
    if (s || s.error().code != Errc::busy || attempt == 8) return s;
  }
}

}  // namespace

Result<CheckpointId> resolve_checkpoint(Backend& store, std::string_view name, bool* by_tag) {
  if (by_tag != nullptr) *by_tag = false;
  if (valid_tag(name)) {
    auto bytes = store.get("tags/" + std::string(name), 64);
    if (bytes) {
      auto id = tag_target(*bytes);
      if (!id) {
        return make_error(Errc::corrupt_image, store.name() + ": tag '" + std::string(name) +
                                                   "' does not hold a checkpoint id");
      }
      if (by_tag != nullptr) *by_tag = true;
      return *id;
    }
    if (bytes.error().code != Errc::not_found) return std::move(bytes).error();
  }
  bool hex = name.size() >= 8 && name.size() <= 32 &&
             name.find_first_not_of("0123456789abcdef") == std::string_view::npos;
  if (!hex) {
    return make_error(Errc::not_found, "no checkpoint named '" + std::string(name.substr(0, 128)) +
                                           "' in " + store.name());
  }
  if (name.size() == 32) return *Id128::from_hex(name);
  GCR_TRY_ASSIGN(auto names, store.list("manifests"));
  std::vector<CheckpointId> matches;
  for (const auto& n : names) {
    auto id = id_from_file_name(n, "manifest");
    if (id && id->hex().starts_with(name)) matches.push_back(*id);
  }
  if (matches.size() == 1) return matches[0];
  if (matches.empty()) {
    return make_error(Errc::not_found,
                      "no checkpoint named '" + std::string(name) + "' in " + store.name());
  }
  return make_error(Errc::invalid_argument, "'" + std::string(name) + "' is the start of " +
                                                std::to_string(matches.size()) +
                                                " checkpoint ids in " + store.name());
}

Result<bool> has_checkpoint(Backend& store, const CheckpointId& id) {
  auto bytes = store.get(manifest_key(id), kMaxManifestBytes);
  if (bytes) return true;
  if (bytes.error().code == Errc::not_found) return false;
  return std::move(bytes).error();
}

Result<Manifest> read_checkpoint_manifest(Backend& store, const CheckpointId& id) {
  auto read = read_manifests(store, {id});
  return std::move(read.front());
}

Result<std::uint64_t> bytes_to_copy(Backend& from, Backend& to, const CheckpointId& id) {
  auto existing = to.get(manifest_key(id), kMaxManifestBytes);
  if (existing) return std::uint64_t{0};
  if (existing.error().code != Errc::not_found) return std::move(existing).error();
  std::string origin = "manifest " + id.hex() + " (" + from.name() + ")";
  GCR_TRY_ASSIGN(auto manifest_bytes, from.get(manifest_key(id), kMaxManifestBytes));
  GCR_TRY_ASSIGN(Manifest manifest, decode_manifest(manifest_bytes, origin));
  GCR_TRY_ASSIGN(ChunkMap present, load_chunk_map(to, MarkedPacks::skip));
  std::unordered_set<ChunkId, Id128Hash> counted;
  std::uint64_t bytes = 0;
  for (const ChunkRef& c : manifest.chunks)
    if (!c.zero && !present.contains(c.id) && counted.insert(c.id).second) bytes += c.raw_bytes;
  return bytes;
}

Result<TransferReport> copy_checkpoint(Backend& from, Backend& to, const CheckpointId& id,
                                       const TransferOptions& options) {
  auto started = std::chrono::steady_clock::now();
  TransferReport report;
  report.id = id;
  std::string origin = "manifest " + id.hex() + " (" + from.name() + ")";
  GCR_TRY_ASSIGN(auto manifest_bytes, from.get(manifest_key(id), kMaxManifestBytes));
  GCR_TRY_ASSIGN(Manifest manifest, decode_manifest(manifest_bytes, origin));
  if (manifest.id != id) {
    return make_error(Errc::corrupt_image, origin + ": holds checkpoint " + manifest.id.hex());
  }
  std::unordered_map<ChunkId, std::uint32_t, Id128Hash> named;
  for (const ChunkRef& c : manifest.chunks) {
    if (!c.zero) named.emplace(c.id, c.raw_bytes);
  }
  report.chunks = named.size();
  for (const auto& [cid, raw] : named) report.logical_bytes += raw;

  auto existing = to.get(manifest_key(id), kMaxManifestBytes);
  if (existing) {
    report.already_there = true;
    report.chunks_present = report.chunks;
    report.present_bytes = report.logical_bytes;
  } else if (existing.error().code != Errc::not_found) {
    return std::move(existing).error();
  } else {
    std::unordered_map<ChunkId, PackId, Id128Hash> present;
    if (options.known_in_destination != nullptr && !options.known_in_destination->empty()) {
      present = std::move(*options.known_in_destination);
    } else {
      GCR_TRY_ASSIGN(ChunkMap loaded, load_chunk_map(to, MarkedPacks::skip));
      for (const auto& [cid, at] : loaded) present.emplace(cid, at.pack);
    }
    // Where each chunk the manifest names is in the destination.
    std::unordered_map<ChunkId, PackId, Id128Hash> placed;
    std::vector<ChunkId> missing;
    for (const auto& [cid, raw] : named) {
      if (auto it = present.find(cid); it != present.end()) {
        ++report.chunks_present;
        report.present_bytes += raw;
        placed.emplace(cid, it->second);
      } else {
        missing.push_back(cid);
      }
    }
    std::optional<ChunkMap> source;
    ChunkCopier copier{from, to, options, report, placed};
    std::unordered_set<ChunkId, Id128Hash> pending(missing.begin(), missing.end());
    for (std::size_t i = 0; i < options.stages.size(); ++i) {
      std::vector<ChunkId> stage;
      for (const ChunkId& cid : options.stages[i]) {
        if (pending.erase(cid) > 0) stage.push_back(cid);
      }
      GCR_TRY(copier.copy(stage, origin, source, /*in_order=*/true));
      if (options.stage_done) options.stage_done(i);
      if (i == 0) {
        fault_point(Fault::transfer_after_stage);
        pause_point(Fault::transfer_after_stage);
      }
    }
    std::erase_if(missing, [&](const ChunkId& cid) { return !pending.contains(cid); });
    GCR_TRY(copier.copy(missing, origin, source));
    // Note [A commit re-checks its packs]. A bucket's gc, run from any machine, may since have
    // marked or deleted a pack this transfer found chunks in, or even one it wrote (with a grace
    // of 0). So right before the commit it lists packs/ once more, and copies again, into new
    // packs, every chunk whose pack is marked or gone; a pack seen unmarked here cannot go
    // before the grace period has passed, and the commit is the very next request
    // (bucket_gc.h, Note [Bucket gc and writers]). A local store answers the same, trivially.
    pause_point(Fault::transfer_before_check);
    for (int round = 0;; ++round) {
      GCR_TRY_ASSIGN(BackendPacks packs, list_packs(to));
      std::vector<ChunkId> lost;
      for (const auto& [cid, pack] : placed) {
        if (!packs.indexed.contains(pack) || packs.marked.contains(pack)) lost.push_back(cid);
      }
      if (lost.empty()) break;
      if (round == 3) {
        return make_error(Errc::busy, "committing checkpoint " + id.hex() + " to " + to.name() +
                                          ": gc keeps marking the packs it needs; run it again "
                                          "when gc is done");
      }
      for (const ChunkId& cid : lost) {
        if (present.erase(cid) > 0) {
          --report.chunks_present;
          report.present_bytes -= named[cid];
        }
      }
      GCR_TRY(copier.copy(lost, origin, source));
    }
    Status s = to.put(manifest_key(id), manifest_bytes, PutMode::create_only);
    if (!s) {
      Error e = std::move(s).error();
      e.message = "committing checkpoint " + id.hex() + " to " + to.name() + ": " + e.message;
      return e;
    }
    if (options.known_in_destination != nullptr) {
      for (const auto& [cid, pack] : placed) present[cid] = pack;
      *options.known_in_destination = std::move(present);
    }
  }
  if (options.tag) {
    if (!valid_tag(*options.tag)) {
      return make_error(Errc::invalid_argument, "'" + *options.tag + "' is not a valid name");
    }
    std::string text = id.hex() + "\n";
    GCR_TRY(set_tag(to, *options.tag, std::as_bytes(std::span(text.data(), text.size()))));
  }
  report.elapsed_ns =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now() - started)
                                     .count());
  return report;
}

std::string describe_transfer(const TransferReport& r, std::string_view verb,
                              std::string_view where) {
  std::string out = std::string(verb) + " " + r.id.hex().substr(0, 12) + " " + std::string(where);
  if (r.already_there) return out + ": already there\n";
  double seconds = static_cast<double>(r.elapsed_ns) / 1e9;
  double dedup = r.logical_bytes == 0 ? 0.0
                                      : 100.0 * static_cast<double>(r.present_bytes) /
                                            static_cast<double>(r.logical_bytes);
  char tail[160];
  std::snprintf(tail, sizeof tail, " (%.1f%% already there), %llu pack%s, %.2f s", dedup,
                static_cast<unsigned long long>(r.packs_written), r.packs_written == 1 ? "" : "s",
                seconds);
  out += ": " + bytes_text(r.copied_bytes) + " moved of " + bytes_text(r.logical_bytes) + tail;
  if (seconds > 0 && r.copied_bytes > 0) {
    char rate[48];
    std::snprintf(rate, sizeof rate, ", %.0f MiB/s",
                  static_cast<double>(r.copied_bytes) / (1 << 20) / seconds);
    out += rate;
  }
  return out + "\n";
}

}  // namespace gcr::store
