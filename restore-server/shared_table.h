// gcrd's side of the table it shares with a process (gcr/cow_table.h): for a checkpoint's soft
// copy-on-write, or an on-demand restore. gcrd creates it (a memfd "gcr-cow", every entry
// pending), sends its fd with the control protocol's cow_begin, and keeps it mapped.
#pragma once

#include <cstdint>
#include <span>

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
  std::uint32_t count() const { return header_->count; }
  cow::Entry& entry(std::uint32_t i) const { return cow::entries(header_)[i]; }

 private:
  CowTable() = default;
  UniqueFd fd_;
  cow::TableHeader* header_ = nullptr;
  std::size_t bytes_ = 0;
};

// True when the process waits for an entry gcrd has not finished.
bool any_wanted(const CowTable& t);

}  // namespace gcr::gcrd
