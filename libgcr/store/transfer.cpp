// Transfer: see transfer.h.
#include "store/transfer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "gcr/manifest.h"
#include "gcr/store.h"
#include "store/compress.h"
#include "store/fault.h"
#include "store/layout.h"
#include "store/pack_format.h"
#include "store/workers.h"

namespace gcr::store {
namespace {

struct Located {
  PackId pack;
  IndexEntry entry;
};
using ChunkMap = std::unordered_map<ChunkId, Located, Id128Hash>;

std::string index_key(const PackId& p) {
  return "packs/" + p.hex() + ".idx";
}
std::string pack_key(const PackId& p) {
  return "packs/" + p.hex() + ".pack";
}
std::string manifest_key(const CheckpointId& c) {
  return "manifests/" + c.hex() + ".manifest";
}

// Every chunk the store's sealed packs hold. An index that cannot be read is left out: in a
// destination its chunks count as absent (copied again), in a source as missing (an error then
// names the chunk).
Result<ChunkMap> load_chunk_map(Backend& store) {
  GCR_TRY_ASSIGN(auto names, store.list("packs"));
  std::vector<PackId> ids;
  for (const auto& n : names) {
    if (auto id = id_from_file_name(n, "idx")) ids.push_back(*id);
  }
  std::vector<std::optional<PackIndex>> loaded(ids.size());
  std::vector<Error> errors(ids.size(), Error{Errc::ok, {}});
  WorkerPool pool(std::min<unsigned>(store.parallelism(), std::max<std::size_t>(ids.size(), 1)));
  pool.parallel_for(ids.size(), [&](std::size_t i) {
    auto bytes = store.get(index_key(ids[i]), kMaxIndexBytes);
    if (!bytes) {
      errors[i] = std::move(bytes).error();
      return;
    }
    std::string origin = "pack index " + ids[i].hex() + " (" + store.name() + ")";
    auto index = decode_pack_index(*bytes, origin);
    if (!index) {
      errors[i] = std::move(index).error();
    } else if (index->pack != ids[i]) {
      errors[i] = Error{Errc::corrupt_image, origin + ": names pack " + index->pack.hex()};
    } else {
      loaded[i] = std::move(index).value();
    }
  });
  for (const Error& e : errors) {
    // Transport failures are not damage: the listing is incomplete, so stop.
    if (e.code == Errc::unreachable || e.code == Errc::permission_denied ||
        e.code == Errc::clock_skew || e.code == Errc::timeout) {
      return e;
    }
  }
  ChunkMap map;
  for (const auto& index : loaded) {
    if (!index) continue;
    for (const IndexEntry& e : index->entries) map.emplace(e.id, Located{index->pack, e});
  }
  return map;
}

Status check_record(std::span<const std::byte> record, const Located& at,
                    const std::string& origin) {
  const IndexEntry& e = at.entry;
  GCR_TRY(check_record_header(record.first(kRecordHeaderBytes), e, origin));
  auto payload = record.subspan(kRecordHeaderBytes, e.stored_bytes);
  std::vector<std::byte> decoded;
  std::span<const std::byte> raw = payload;
  if (e.codec != Codec::raw) {
    decoded.resize(e.raw_bytes);
    Status s = unpack_chunk(e.codec, payload, decoded);
    if (!s) {
      return make_error(Errc::corrupt_image, origin + " offset " + std::to_string(e.offset) +
                                                 ": chunk " + e.id.hex() + ": " +
                                                 s.error().message);
    }
    raw = decoded;
  }
  if (chunk_id_of(raw) != e.id) {
    return make_error(Errc::corrupt_image, origin + " offset " + std::to_string(e.offset) +
                                               ": checksum mismatch for chunk " + e.id.hex());
  }
  return ok();
}

// Records read from one source pack with one ranged read.
struct Range {
  PackId pack;
  std::uint64_t offset = 0, bytes = 0;
  std::vector<Located> records;
};

// One destination pack: the ranges whose records it receives.
struct Batch {
  std::vector<Range> ranges;
};

std::vector<Batch> plan_batches(std::vector<Located> wanted, const TransferOptions& o) {
  std::sort(wanted.begin(), wanted.end(), [](const Located& a, const Located& b) {
    return a.pack != b.pack ? a.pack < b.pack : a.entry.offset < b.entry.offset;
  });
  std::vector<Batch> batches;
  std::uint64_t batch_bytes = 0;
  for (const Located& l : wanted) {
    std::uint64_t rec = l.entry.record_bytes();
    if (batches.empty() || batch_bytes + rec > o.pack_target_bytes) {
      if (batches.empty() || !batches.back().ranges.empty()) batches.emplace_back();
      batch_bytes = 0;
    }
    auto& ranges = batches.back().ranges;
    bool extend =
        !ranges.empty() && ranges.back().pack == l.pack &&
        l.entry.offset >= ranges.back().offset + ranges.back().bytes &&
        l.entry.offset - (ranges.back().offset + ranges.back().bytes) <= o.max_range_gap_bytes &&
        l.entry.offset + rec - ranges.back().offset <= o.max_range_bytes;
    if (extend) {
      ranges.back().bytes = l.entry.offset + rec - ranges.back().offset;
    } else {
      ranges.push_back(Range{l.pack, l.entry.offset, rec, {}});
    }
    ranges.back().records.push_back(l);
    batch_bytes += rec;
  }
  return batches;
}

// Reads a batch's records from `from`, checks them, and writes them to `to` as one new pack
// (pack first, then its index: the pack is complete before anything can name it).
Result<std::uint64_t> copy_batch(Backend& from, Backend& to, const Batch& batch) {
  PackIndex index;
  index.pack = PackId::random();
  std::vector<std::byte> pack;
  auto header = encode_pack_header(index.pack);
  pack.insert(pack.end(), header.begin(), header.end());
  std::vector<std::byte> buffer;
  for (const Range& r : batch.ranges) {
    buffer.resize(r.bytes);
    GCR_TRY(from.get_range(pack_key(r.pack), r.offset, buffer));
    std::string origin = "pack " + r.pack.hex() + " (" + from.name() + ")";
    for (const Located& l : r.records) {
      auto record = std::span<const std::byte>(buffer).subspan(l.entry.offset - r.offset,
                                                               l.entry.record_bytes());
      GCR_TRY(check_record(record, l, origin));
      IndexEntry e = l.entry;
      e.offset = pack.size();
      std::size_t used = kRecordHeaderBytes + e.stored_bytes;
      pack.insert(pack.end(), record.begin(), record.begin() + static_cast<std::ptrdiff_t>(used));
      pack.resize(pack.size() + (e.record_bytes() - used));  // zero padding
      index.entries.push_back(e);
    }
  }
  index.pack_bytes = pack.size();
  GCR_TRY(to.put(pack_key(index.pack), pack, PutMode::create_only));
  GCR_TRY(to.put(index_key(index.pack), encode_pack_index(index), PutMode::create_only));
  fault_point(Fault::transfer_after_pack);
  return pack.size();
}

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

}  // namespace

Result<CheckpointId> resolve_checkpoint(Backend& store, std::string_view name, bool* by_tag) {
  if (by_tag != nullptr) *by_tag = false;
  if (valid_tag(name)) {
    auto bytes = store.get("tags/" + std::string(name), 64);
    if (bytes) {
      std::string_view text(reinterpret_cast<const char*>(bytes->data()), bytes->size());
      auto id = text.size() == 33 && text[32] == '\n' ? Id128::from_hex(text.substr(0, 32))
                                                      : std::nullopt;
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
    GCR_TRY_ASSIGN(ChunkMap present, load_chunk_map(to));
    std::vector<ChunkId> missing;
    for (const auto& [cid, raw] : named) {
      if (present.contains(cid)) {
        ++report.chunks_present;
        report.present_bytes += raw;
      } else {
        missing.push_back(cid);
      }
    }
    if (!missing.empty()) {
      GCR_TRY_ASSIGN(ChunkMap source, load_chunk_map(from));
      std::vector<Located> wanted;
      for (const ChunkId& cid : missing) {
        auto it = source.find(cid);
        if (it == source.end()) {
          return make_error(Errc::corrupt_image,
                            origin + ": chunk " + cid.hex() +
                                " is in no sealed pack there; run 'gcr image verify' on it");
        }
        wanted.push_back(it->second);
      }
      std::uint64_t total_raw = 0;
      for (const Located& l : wanted) total_raw += l.entry.raw_bytes;
      auto batches = plan_batches(std::move(wanted), options);
      std::vector<Result<std::uint64_t>> results(batches.size(), std::uint64_t{0});
      std::atomic<bool> failed{false};
      std::atomic<std::uint64_t> done_raw{0};
      if (options.progress) options.progress(0, total_raw);
      unsigned parallel = std::min(from.parallelism(), to.parallelism());
      WorkerPool pool(std::min<unsigned>(parallel, std::max<std::size_t>(batches.size(), 1)));
      pool.parallel_for(batches.size(), [&](std::size_t i) {
        if (failed) return;  // one failure fails the transfer: do not start more
        results[i] = copy_batch(from, to, batches[i]);
        if (!results[i]) {
          failed = true;
          return;
        }
        if (options.progress) {
          std::uint64_t raw = 0;
          for (const Range& r : batches[i].ranges)
            for (const Located& l : r.records) raw += l.entry.raw_bytes;
          options.progress(done_raw += raw, total_raw);
        }
      });
      for (auto& r : results) {
        if (!r) return std::move(r).error();
        report.copied_bytes += *r;
      }
      report.chunks_copied = missing.size();
      report.packs_written = batches.size();
    }
    Status s = to.put(manifest_key(id), manifest_bytes, PutMode::create_only);
    if (!s) {
      Error e = std::move(s).error();
      e.message = "committing checkpoint " + id.hex() + " to " + to.name() + ": " + e.message;
      return e;
    }
  }
  if (options.tag) {
    if (!valid_tag(*options.tag)) {
      return make_error(Errc::invalid_argument, "'" + *options.tag + "' is not a valid name");
    }
    std::string text = id.hex() + "\n";
    GCR_TRY(to.put("tags/" + *options.tag, std::as_bytes(std::span(text.data(), text.size())),
                   PutMode::replace));
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
