// fetch_chunks: see fetch.h. Batches of at most kBatchBytes of scratch are read while the batch
// before is checked, so the disk and the hashing overlap.
#include "store/fetch.h"

#include <cstring>

#include "gcr/file.h"
#include "store/hash.h"

namespace gcr::store {
namespace {

constexpr std::uint64_t kBatchBytes = 64ull << 20;
constexpr std::size_t kBatchItems = 256;

struct Slot {
  std::array<std::byte, kRecordHeaderBytes> header{};
  std::vector<std::byte> scratch;  // header + payload, when the payload is not read into out
  bool direct = false;             // a raw payload read straight into out
};

bool needs_scratch(const FetchItem& item) {
  return item.entry.codec != Codec::raw || item.keep_stored;
}

void check_zero(FetchItem& item) {
  std::memset(item.out.data(), 0, item.out.size());
  if (item.id != zero_chunk_id(item.raw_bytes)) {
    item.result =
        make_error(Errc::corrupt_image, "chunk " + item.id.hex() +
                                            " is marked as all zeros, but its id is "
                                            "not that of " +
                                            std::to_string(item.raw_bytes) + " zero bytes");
  }
}

void check_record(FetchItem& item, Slot& slot) {
  const IndexEntry& e = item.entry;
  const std::string& origin = item.pack->origin();
  std::span<const std::byte> header =
      slot.direct ? std::span<const std::byte>(slot.header)
                  : std::span<const std::byte>(slot.scratch).first(kRecordHeaderBytes);
  if (Status s = check_record_header(header, e, origin); !s) {
    item.result = std::move(s);
    return;
  }
  std::span<const std::byte> payload =
      slot.direct ? std::span<const std::byte>(item.out)
                  : std::span<const std::byte>(slot.scratch).subspan(kRecordHeaderBytes);
  if (Status s = unpack_chunk(e.codec, payload, item.out); !s) {
    item.result =
        make_error(Errc::corrupt_image, origin + ": offset " + std::to_string(e.offset) +
                                            ": chunk " + e.id.hex() + ": " + s.error().message);
    return;
  }
  ChunkId got = chunk_id_of(item.out);
  if (got != item.id) {
    item.result =
        make_error(Errc::corrupt_image, origin + ": offset " + std::to_string(e.offset) +
                                            ": checksum mismatch: chunk " + item.id.hex() +
                                            " reads back as " + got.hex());
    return;
  }
  if (item.keep_stored) item.stored.assign(payload.begin(), payload.end());
}

}  // namespace

Status fetch_chunks(io::IoQueue& io, WorkerPool& pool, std::span<FetchItem> items) {
  // Cut into batches by scratch bytes and count.
  std::vector<std::pair<std::size_t, std::size_t>> batches;
  for (std::size_t i = 0; i < items.size();) {
    std::size_t start = i;
    std::uint64_t bytes = 0;
    while (i < items.size() && i - start < kBatchItems &&
           (i == start || bytes + items[i].raw_bytes <= kBatchBytes)) {
      bytes += items[i].raw_bytes;
      ++i;
    }
    batches.emplace_back(start, i);
  }
  std::vector<Slot> slots(items.size());
  std::vector<std::size_t> pending(batches.size(), 0);
  io::DrainGuard guard(io);  // after slots and pending: no read outlives them

  auto submit = [&](std::size_t b) -> Status {
    for (std::size_t i = batches[b].first; i < batches[b].second; ++i) {
      FetchItem& item = items[i];
      item.result = ok();
      if (item.zero) continue;
      if (item.out.size() != item.raw_bytes || item.pack == nullptr ||
          item.entry.raw_bytes != item.raw_bytes || item.entry.id != item.id) {
        item.result = make_error(Errc::internal, "fetch of chunk " + item.id.hex() +
                                                     ": location does not match the request");
        continue;
      }
      Slot& slot = slots[i];
      std::vector<iovec> iov;
      if (needs_scratch(item)) {
        slot.scratch.resize(kRecordHeaderBytes + item.entry.stored_bytes);
        iov.push_back({slot.scratch.data(), slot.scratch.size()});
      } else {
        slot.direct = true;
        iov.push_back({slot.header.data(), slot.header.size()});
        iov.push_back({item.out.data(), item.out.size()});
      }
      ++pending[b];
      GCR_TRY(io.read(
          item.pack->fd(), item.entry.offset, std::move(iov), [&item, &pending, b](int err) {
            --pending[b];
            if (err == 0) return;
            std::string where = item.pack->origin() + ": offset " +
                                std::to_string(item.entry.offset) + ": chunk " + item.id.hex();
            item.result = err == EIO ? make_error(Errc::corrupt_image,
                                                  where +
                                                      ": record ends past the end of the "
                                                      "file (truncated pack) or I/O error")
                                     : errno_error(where, err);
          }));
    }
    return ok();
  };

  if (!batches.empty()) GCR_TRY(submit(0));
  for (std::size_t b = 0; b < batches.size(); ++b) {
    if (b + 1 < batches.size()) GCR_TRY(submit(b + 1));
    GCR_TRY(io::wait_until_zero(io, pending[b]));
    auto [first, last] = batches[b];
    pool.parallel_for(last - first, [&](std::size_t k) {
      FetchItem& item = items[first + k];
      if (item.zero) {
        check_zero(item);
      } else if (item.result) {
        check_record(item, slots[first + k]);
      }
      slots[first + k].scratch = {};
    });
  }
  guard.dismiss();  // every read has completed; other requests on io are not ours to wait for
  return ok();
}

}  // namespace gcr::store
