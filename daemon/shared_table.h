// gcrd's side of the table it shares with a process (gcr/cow_table.h): for a checkpoint's soft
// copy-on-write, or an on-demand restore. gcrd creates it (a memfd "gcr-cow", every entry
// pending), sends its fd with the control protocol's cow_begin, and keeps it mapped.
//
// The process may be hostile (docs/security.md): the memfd is sealed against shrinking and
// growing before the process gets it, so it cannot make gcrd's mapping fault; the count and every
// region's bounds are gcrd's own copies, never read back from the shared memory. Only the state
// and wanted words are the process's to write, and gcrd's readers treat them as untrusted.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "gcr/control.h"
#include "gcr/cow_table.h"
#include "gcr/result.h"
#include "gcr/unique_fd.h"

namespace gcr::gcrd {

class CowTable {
 public:
  static Result<CowTable> create(std::span<const control::RegionRecord> regions,
                                 cow::TableKind kind);
  CowTable(CowTable&& o) noexcept;
  CowTable& operator=(CowTable&&) = delete;
  CowTable(const CowTable&) = delete;
  ~CowTable();

  int fd() const { return fd_.get(); }
  std::uint32_t count() const { return static_cast<std::uint32_t>(sizes_.size()); }
  // The shared entry i (< count()): only its state and wanted words are meaningful to gcrd.
  cow::Entry& entry(std::uint32_t i) const { return cow::entries(header_)[i]; }
  std::uint64_t size(std::uint32_t i) const { return sizes_[i]; }

 private:
  CowTable() = default;
  UniqueFd fd_;
  cow::TableHeader* header_ = nullptr;
  std::size_t bytes_ = 0;
  std::vector<std::uint64_t> sizes_;  // gcrd's copy of each entry's size
};

// True when the process waits for an entry gcrd has not finished.
bool any_wanted(const CowTable& t);

}  // namespace gcr::gcrd
