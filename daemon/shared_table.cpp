// gcrd's side of the shared table (shared_table.h).
#include "shared_table.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <utility>

namespace gcr::gcrd {

Result<CowTable> CowTable::create(std::span<const control::RegionRecord> regions,
                                  cow::TableKind kind) {
  if (regions.empty() || regions.size() > cow::kMaxEntries)
    return Error{Errc::invalid_argument,
                 "copy-on-write table of " + std::to_string(regions.size()) + " regions"};
  CowTable t;
  auto count = static_cast<std::uint32_t>(regions.size());
  t.bytes_ = cow::table_bytes(count);
  t.fd_ = UniqueFd(memfd_create("gcr-cow", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!t.fd_) return errno_error("creating the copy-on-write table");
  if (ftruncate(t.fd_.get(), static_cast<off_t>(t.bytes_)) != 0)
    return errno_error("sizing the copy-on-write table");
  if (fcntl(t.fd_.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return errno_error("sealing the copy-on-write table");
  void* p = mmap(nullptr, t.bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, t.fd_.get(), 0);
  if (p == MAP_FAILED) return errno_error("mapping the copy-on-write table");
  t.header_ = static_cast<cow::TableHeader*>(p);
  t.header_->magic = cow::kTableMagic;
  t.header_->version = cow::kTableVersion;
  t.header_->count = count;
  t.header_->gcrd_pid = static_cast<std::uint32_t>(getpid());
  t.header_->kind = kind;
  t.sizes_.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    t.sizes_.push_back(regions[i].size);
    cow::Entry& e = t.entry(i);
    e.address = regions[i].address;
    e.size = regions[i].size;
    e.device = regions[i].device;
    e.state.store(cow::kPending);
    e.wanted.store(0);
  }
  return t;
}

CowTable::CowTable(CowTable&& o) noexcept
    : fd_(std::move(o.fd_)),
      header_(std::exchange(o.header_, nullptr)),
      bytes_(o.bytes_),
      sizes_(std::move(o.sizes_)) {}

CowTable::~CowTable() {
  if (header_) munmap(header_, bytes_);
}

bool any_wanted(const CowTable& t) {
  for (std::uint32_t i = 0; i < t.count(); ++i)
    if (t.entry(i).wanted.load(std::memory_order_acquire) &&
        t.entry(i).state.load(std::memory_order_acquire) != cow::kDone)
      return true;
  return false;
}

}  // namespace gcr::gcrd
