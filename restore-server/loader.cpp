// The loader (loader.h).
#include "loader.h"

#include <cstdio>

#include "pace.h"
#include "staging.h"

namespace gcr::gcrd {
namespace {

std::string hex(std::uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace

Result<std::unique_ptr<Loader>> Loader::start(std::unique_ptr<store::CheckpointReader> reader,
                                              std::vector<Item> items, const CowTable* table) {
  if (table && table->count() != items.size())
    return Error{Errc::internal, "the load table does not match the regions"};
  std::unique_ptr<Loader> l(new Loader);
  l->reader_ = std::move(reader);
  l->items_ = std::move(items);
  l->table_ = table;
  l->thread_ = std::thread([p = l.get()] { p->run(); });
  return l;
}

Loader::~Loader() {
  stop();
  (void)wait();
}

Status Loader::wait() {
  std::lock_guard lock(mu_);
  if (!joined_) {
    if (thread_.joinable()) thread_.join();
    joined_ = true;
  }
  return result_;
}

void Loader::run() noexcept {
  Status s = ok();
  try {
    s = load_all();
  } catch (const std::exception& e) {
    s = Error{Errc::internal, std::string("loader: ") + e.what()};
  }
  if (!s) {
    result_ = std::move(s);  // read by wait() after the join
    failed_.store(true);
  }
}

Status Loader::load_all() {
  GCR_TRY_ASSIGN(Gpu * gpu, Gpu::get());
  Staging staging;
  const Pace pace("GCR_LOAD_MIB_PER_S");
  const std::size_t n = items_.size();
  std::vector<std::uint64_t> offset(n, 0);  // bytes of each region loaded so far
  std::vector<bool> done(n, false);
  std::size_t in_order = 0;  // the next region in the given order
  std::size_t remaining = n;
  auto wanted_entry = [&]() -> std::optional<std::size_t> {
    if (!table_) return std::nullopt;
    for (std::size_t i = 0; i < n; ++i)
      if (!done[i] && table_->entry(i).wanted.load(std::memory_order_acquire)) return i;
    return std::nullopt;
  };
  while (remaining > 0) {
    if (stop_.load()) return Error{Errc::internal, "loading stopped: the restore failed"};
    pace.wait(loaded_.load(), [&] { return wanted_entry().has_value(); });
    std::size_t i;
    if (auto w = wanted_entry()) {
      i = *w;
    } else {
      while (done[in_order]) ++in_order;
      i = in_order;
    }
    Item& item = items_[i];
    if (table_ && offset[i] == 0) {
      std::uint32_t s = cow::kPending;
      table_->entry(i).state.compare_exchange_strong(s, cow::kReading);
      if (table_->entry(i).wanted.load()) wanted_.fetch_add(1);
    }
    std::uint64_t len = std::min(kPieceBytes, item.object.size - offset[i]);
    GCR_TRY_ASSIGN(std::span<std::byte> buf, staging.get(len));
    GCR_TRY(reader_->read(item.object, offset[i], buf)
                .context("loading region " + hex(item.object.address)));
    GCR_TRY(gpu->use(item.destination->device()));
    GCR_TRY(item.destination->write(offset[i], buf));
    offset[i] += len;
    loaded_.fetch_add(len);
    if (offset[i] == item.object.size) {
      done[i] = true;
      --remaining;
      if (table_) {
        table_->entry(i).state.store(cow::kDone, std::memory_order_release);
        cow::futex_wake_all(&table_->entry(i).state);
      }
    }
  }
  return ok();
}

}  // namespace gcr::gcrd
