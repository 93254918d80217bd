// PackWriter: see pack_writer.h.
//
// Note [Sealed packs are gc's]: once a pack's .idx is in packs/, any writer that starts may load
// it and name its chunks in a manifest it commits later, as dedup "other". So a sealed pack is
// deleted only by gc under the exclusive gc.lock, when no writer is open and every manifest has
// been read; a writer that fails after sealing leaves its packs for gc. Only an unsealed pack,
// which nobody else can see, is removed by the writer that made it (PackWriter::discard).
#include "store/pack_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "gcr/file.h"
#include "store/fault.h"

namespace gcr::store {

PackWriter::PackWriter(const Layout& layout, PackId id, UniqueFd fd)
    : layout_(layout), id_(id), path_(layout.pack(id)), fd_(std::move(fd)) {}

Result<std::unique_ptr<PackWriter>> PackWriter::create(const Layout& layout) {
  PackId id = PackId::random();
  auto tmp = layout.tmp_file("pack");
  GCR_TRY_ASSIGN(UniqueFd fd, io::open_file(tmp, O_RDWR | O_CREAT | O_EXCL, 0600));
  auto header = encode_pack_header(id);
  Status s = io::write_all(fd.get(), header, 0, tmp);
  if (s) s = io::rename_file(tmp, layout.pack(id));
  if (!s) {
    (void)io::remove_file(tmp);
    return std::move(s).error();
  }
  fault_point(Fault::after_pack_create);
  return std::unique_ptr<PackWriter>(new PackWriter(layout, id, std::move(fd)));
}

Result<IndexEntry> PackWriter::append(io::IoQueue& io, const ChunkId& id, Codec codec,
                                      std::uint32_t raw_bytes, std::span<const std::byte> payload,
                                      io::Done done) {
  if (sealed_) return make_error(Errc::internal, "append to sealed pack " + id_.hex());
  IndexEntry e;
  e.id = id;
  e.offset = end_;
  e.raw_bytes = raw_bytes;
  e.stored_bytes = static_cast<std::uint32_t>(payload.size());
  e.codec = codec;

  struct Frame {
    std::array<std::byte, kRecordHeaderBytes> header;
    std::array<std::byte, 8> pad{};
  };
  auto frame = std::make_shared<Frame>();
  frame->header = encode_record_header(e);
  std::vector<iovec> iov;
  iov.push_back({frame->header.data(), frame->header.size()});
  iov.push_back({const_cast<std::byte*>(payload.data()), payload.size()});
  std::size_t pad = (8 - payload.size() % 8) % 8;
  if (pad != 0) iov.push_back({frame->pad.data(), pad});

  std::uint64_t offset = end_;
  end_ += e.record_bytes();
  entries_.push_back(e);
  GCR_TRY(io.write(
      fd_.get(), offset, std::move(iov), [this, frame, offset, done = std::move(done)](int err) {
        if (err != 0 && status_) {
          status_ = io::file_error(
              "cannot write a chunk at offset " + std::to_string(offset) + " of pack", path_, err);
        }
        if (err == 0 && !wrote_one_) {
          wrote_one_ = true;
          fault_point(Fault::after_chunk_write);
        }
        if (done) done(err);
      }));
  return e;
}

Status PackWriter::sync() {
  GCR_TRY(status_);
  return io::sync_fd(fd_.get(), path_);
}

Result<std::shared_ptr<const PackIndex>> PackWriter::seal() {
  GCR_TRY(status_);
  PackIndex index;
  index.pack = id_;
  index.pack_bytes = end_;
  index.entries = entries_;
  auto bytes = encode_pack_index(index);
  GCR_TRY(io::write_file_durably(layout_.tmp_file("idx"), layout_.index(id_), bytes));
  sealed_ = true;
  // The index as readers will see it: sorted.
  std::sort(index.entries.begin(), index.entries.end(),
            [](const IndexEntry& a, const IndexEntry& b) { return a.id < b.id; });
  return std::make_shared<const PackIndex>(std::move(index));
}

void PackWriter::discard() {
  if (sealed_) return;  // Note [Sealed packs are gc's]
  fd_.reset();
  (void)io::remove_file(path_);
}

}  // namespace gcr::store
