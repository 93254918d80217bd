// PackReader: an open sealed pack, header checked, ready for reads at record offsets. Readers open
// every pack a checkpoint needs while they hold gc.lock shared; an open pack stays readable after
// gc deletes or rewrites it, so a reader needs the lock only while it opens.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "gcr/result.h"
#include "gcr/unique_fd.h"
#include "store/layout.h"
#include "store/pack_format.h"

namespace gcr::store {

class PackReader {
 public:
  // Opens packs/<id>.pack and checks its header (magic, version, id) and that the file holds at
  // least the pack_bytes its index names.
  static Result<std::shared_ptr<PackReader>> open(const Layout& layout, const PackId& id,
                                                  std::uint64_t pack_bytes);

  int fd() const { return fd_.get(); }
  const PackId& id() const { return id_; }
  std::uint64_t size() const { return size_; }
  // "pack 0a1b… (/store/packs/0a1b….pack)", for errors.
  const std::string& origin() const { return origin_; }

 private:
  PackId id_;
  UniqueFd fd_;
  std::uint64_t size_ = 0;
  std::string origin_;
};

}  // namespace gcr::store
