// PackWriter: one pack file being written by one writer (docs §2, §5). Created with its header in
// tmp/ and moved into packs/; records are appended through an IoQueue, many in flight; sync() and
// seal() make it durable and write its index, after which it is immutable and belongs to gc
// (Note [Sealed packs are gc's]). An unsealed pack is invisible to everyone else.
#pragma once

#include <filesystem>
#include <memory>
#include <span>

#include "gcr/result.h"
#include "gcr/unique_fd.h"
#include "io/io_queue.h"
#include "store/layout.h"
#include "store/pack_format.h"

namespace gcr::store {

class PackWriter {
 public:
  static Result<std::unique_ptr<PackWriter>> create(const Layout& layout);
  ~PackWriter() = default;  // closes the file; the caller drains the IoQueue first
  PackWriter(const PackWriter&) = delete;
  PackWriter& operator=(const PackWriter&) = delete;

  const PackId& id() const { return id_; }
  const std::filesystem::path& path() const { return path_; }
  std::uint64_t end() const { return end_; }
  std::size_t records() const { return entries_.size(); }
  bool sealed() const { return sealed_; }

  // Queues a record at the pack's end. payload must stay valid until `done` runs; the caller's
  // `done` may own it. A failed write is kept in status() (naming the pack and offset) and also
  // passed to done.
  Result<IndexEntry> append(io::IoQueue& io, const ChunkId& id, Codec codec,
                            std::uint32_t raw_bytes, std::span<const std::byte> payload,
                            io::Done done);
  // The first write that failed, once the IoQueue has been drained.
  const Status& status() const { return status_; }

  // fsync(2) of the pack; every append must have completed.
  Status sync();
  // Writes the index to tmp/, fsyncs it and renames it into packs/: the pack is sealed. The caller
  // fsyncs packs/ afterwards (once for all its packs).
  Result<std::shared_ptr<const PackIndex>> seal();
  // Removes an unsealed pack's file (a writer giving up). Never call it on a sealed pack.
  void discard();

 private:
  PackWriter(const Layout& layout, PackId id, UniqueFd fd);

  Layout layout_;
  PackId id_;
  std::filesystem::path path_;
  UniqueFd fd_;
  std::uint64_t end_ = kPackHeaderBytes;
  std::vector<IndexEntry> entries_;
  Status status_;
  bool sealed_ = false;
  bool wrote_one_ = false;
};

}  // namespace gcr::store
