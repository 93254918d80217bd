// The loader (loader.h).
#include "loader.h"

#include <pthread.h>

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <functional>
#include <optional>
#include <set>
#include <utility>

#include "gcr/background.h"
#include "gcr/settings.h"
#include "gcr/store_workers.h"
#include "pace.h"
#include "piece_cache.h"
#include "staging.h"

namespace gcr::gcrd {
namespace {

// The loader's second stage: writes pieces to the device on a thread of its own while the first
// stage reads the next piece from the store. Two staging buffers take turns.
class Copier {
 public:
  // While `behind` and `background` are set, the copier yields (Note [Loading behind the
  // restore]); `behind` only ever goes from set to clear.
  Copier(Gpu& gpu, const std::atomic<bool>& behind, const std::atomic<bool>& background)
      : gpu_(gpu), behind_(behind), background_(background), thread_([this] { run(); }) {
    pthread_setname_np(thread_.native_handle(), "gcrd-copy");  // in traces (gcr restore --trace)
  }
  ~Copier() { (void)finish(); }
  Copier(const Copier&) = delete;
  Copier& operator=(const Copier&) = delete;

  // A free buffer of `len` bytes (waits for the copier to release one); its slot for submit().
  Result<std::pair<int, std::span<std::byte>>> buffer(std::uint64_t len) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !busy_[0] || !busy_[1] || error_.has_value(); });
    if (error_) return *error_;
    int slot = busy_[0] ? 1 : 0;
    busy_[slot] = true;
    lock.unlock();
    auto buf = staging_[slot].get(len);
    if (!buf) {
      release(slot);
      return buf.error();
    }
    return std::pair<int, std::span<std::byte>>(slot, *buf);
  }

  // Writes buf (from buffer()) at `offset` of dst, then calls done (on the copier's thread).
  void submit(int slot, MappedAllocation* dst, std::uint64_t offset, std::span<std::byte> buf,
              std::function<void()> done) {
    std::lock_guard lock(mu_);
    queue_.push_back({slot, dst, offset, buf, std::move(done)});
    cv_.notify_all();
  }

  // Returns a buffer that will not be submitted.
  void give_back(int slot) { release(slot); }

  // Waits until everything submitted is written; the first error.
  Status finish() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return queue_.empty() && !busy_[0] && !busy_[1]; });
    stop_ = true;
    cv_.notify_all();
    lock.unlock();
    if (thread_.joinable()) thread_.join();
    if (error_) return *error_;
    return ok();
  }

 private:
  struct Piece {
    int slot;
    MappedAllocation* dst;
    std::uint64_t offset;
    std::span<std::byte> buf;
    std::function<void()> done;
  };

  void release(int slot) {
    std::lock_guard lock(mu_);
    busy_[slot] = false;
    cv_.notify_all();
  }

  // Writes a piece, in slices while in the background (the device's copy of a slice is short).
  Status write(const Piece& p, BackgroundScope& scope) {
    for (std::uint64_t done = 0; done < p.buf.size();) {
      scope.set(behind_.load() && background_.load());
      std::uint64_t n = p.buf.size() - done;
      if (scope.on()) n = std::min(n, Loader::kBehindSliceBytes);
      GCR_TRY(p.dst->write(p.offset + done, p.buf.subspan(done, n)));
      done += n;
    }
    return ok();
  }

  void run() {
    BackgroundScope scope;
    for (;;) {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      Piece p = std::move(queue_.front());
      queue_.pop_front();
      bool failed = error_.has_value();
      lock.unlock();
      if (!failed) {
        Status s = gpu_.use(p.dst->device());
        if (s) s = write(p, scope);
        if (s) {
          p.done();
        } else {
          std::lock_guard l(mu_);
          error_ = std::move(s).error();
        }
      }
      release(p.slot);
    }
  }

  Gpu& gpu_;
  const std::atomic<bool>& behind_;
  const std::atomic<bool>& background_;
  Staging staging_[2];
  std::mutex mu_;
  std::condition_variable cv_;
  bool busy_[2] = {false, false};
  std::deque<Piece> queue_;
  std::optional<Error> error_;
  bool stop_ = false;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace

Result<std::unique_ptr<Loader>> Loader::start(std::unique_ptr<store::CheckpointReader> reader,
                                              std::vector<Item> items, const CowTable* table,
                                              std::vector<Watch> watches, bool behind_restore) {
  if (table && table->count() != items.size())
    return Error{Errc::internal, "the load table does not match the regions"};
  for (const Watch& w : watches)
    if (w.entry_of.size() != items.size())
      return Error{Errc::internal, "a load table's map does not match the regions"};
  std::unique_ptr<Loader> l(new Loader);
  l->reader_ = std::move(reader);
  if (table) {
    Watch all{table, {}};
    for (std::size_t i = 0; i < items.size(); ++i)
      all.entry_of.push_back(static_cast<std::int64_t>(i));
    l->watches_.push_back(std::move(all));
  }
  for (Watch& w : watches) l->watches_.push_back(std::move(w));
  l->items_ = std::move(items);
  l->behind_.store(behind_restore && can_run_in_background());
  l->holding_.store(behind_restore && store::usable_cpus() < kCpusToLoadBehind);
  l->thread_ = std::thread([p = l.get()] { p->run(); });
  pthread_setname_np(l->thread_.native_handle(), "gcrd-load");
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
  std::lock_guard lock(ended_mu_);
  ended_ = true;
  ended_cv_.notify_all();
}

bool Loader::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock lock(ended_mu_);
  return ended_cv_.wait_for(lock, timeout, [&] { return ended_; });
}

// One pass over the items, from load_all(): which region is next, how far each is loaded.
class Loader::Pass {
 public:
  Pass(Loader& l, Gpu& gpu, PieceCache& cache, std::string checkpoint)
      : l_(l),
        cache_(cache),
        checkpoint_(std::move(checkpoint)),
        copier_(gpu, l.behind_, l.background_),
        pace_(settings().load_mib_per_s),
        offset_(l.items_.size(), 0),
        done_(l.items_.size(), false),
        remaining_(l.items_.size()) {}

  Status run() {
    while (remaining_ > 0) {
      if (l_.stop_.load()) {
        (void)copier_.finish();
        return Error{Errc::internal, "loading stopped: the restore failed"};
      }
      pace_.wait(l_.loaded_.load(), [&] { return wanted_entry().has_value(); });
      hold();
      GCR_TRY(load_piece(next_item()));
    }
    return copier_.finish();
  }

 private:
  // An item some member waits for (its entry `wanted`), if any.
  std::optional<std::size_t> wanted_entry() const {
    for (const Watch& w : l_.watches_)
      for (std::size_t i = 0; i < done_.size(); ++i)
        if (!done_[i] && w.entry_of[i] >= 0 &&
            w.table->entry(static_cast<std::uint32_t>(w.entry_of[i]))
                .wanted.load(std::memory_order_acquire))
          return i;
    return std::nullopt;
  }

  // Note [Loading behind the restore]: while CRIU restores it polls what waits, in the
  // background; resumed() wakes it.
  void hold() {
    if (!l_.holding_.load()) return;
    scope_.set(true);
    std::unique_lock lock(l_.held_mu_);
    while (l_.holding_.load() && !l_.stop_.load() && cache_.alone(checkpoint_) && !wanted_entry())
      l_.held_cv_.wait_for(lock, std::chrono::milliseconds(2));
  }

  // What is wanted, else the next in the given order.
  std::size_t next_item() {
    auto w = wanted_entry();
    l_.background_.store(l_.behind_.load() && !w && cache_.alone(checkpoint_));
    scope_.set(l_.behind_.load() && l_.background_.load());
    if (w) return *w;
    while (done_[in_order_]) ++in_order_;
    return in_order_;
  }

  // Note [Reading ahead]: the pieces that follow (item, offset), the one read now, in the order
  // the loader takes them when nothing is wanted: the rest of its region, then the given order.
  using Piece = std::pair<std::size_t, std::uint64_t>;
  void read_ahead(const Piece now) {
    Piece at = now;
    for (int k = 0; k < kPiecesAhead; ++k) {
      at.second += kPieceBytes;
      if (at.second >= l_.items_[at.first].object.size) {
        std::size_t j = in_order_;
        while (j < done_.size() && (done_[j] || j == now.first || j == at.first)) ++j;
        if (j >= done_.size()) return;
        at = {j, offset_[j]};
      }
      if (asked_.insert(at).second)
        l_.reader_->prefetch(l_.items_[at.first].object, at.second, kPieceBytes);
    }
  }

  // The first piece of item i: its entries move to `reading` (being loaded).
  void claim(std::size_t i) {
    bool wanted = false;
    for (const Watch& w : l_.watches_) {
      if (w.entry_of[i] < 0) continue;
      cow::Entry& e = w.table->entry(static_cast<std::uint32_t>(w.entry_of[i]));
      std::uint32_t s = cow::kPending;
      e.state.compare_exchange_strong(s, cow::kReading);
      wanted = wanted || e.wanted.load();
    }
    if (wanted) l_.wanted_.fetch_add(1);
  }

  // Reads the next piece of item i (or takes it from a concurrent restore of the same checkpoint)
  // and hands it to the copier, which marks the item's entries done after its last piece.
  Status load_piece(std::size_t i) {
    Item& item = l_.items_[i];
    if (offset_[i] == 0) claim(i);
    std::uint64_t len = std::min(kPieceBytes, item.object.size - offset_[i]);
    if (!l_.holding_.load()) read_ahead({i, offset_[i]});  // Note [Reading ahead]
    GCR_TRY_ASSIGN(auto slot_buf, copier_.buffer(len));
    auto [slot, buf] = slot_buf;
    scope_.set(l_.behind_.load() && l_.background_.load());  // CRIU may have finished meanwhile
    PieceCache::Key key{checkpoint_, item.object.name, item.object.address, offset_[i]};
    if (cache_.get_or_claim(key, buf) == PieceCache::Outcome::copied) {
      l_.shared_.fetch_add(len);
    } else if (Status s = l_.reader_->read(item.object, offset_[i], buf); !s) {
      cache_.abandon(key);
      copier_.give_back(slot);
      (void)copier_.finish();
      return std::move(s).context("loading region " + hex_address(item.object.address)).error();
    } else {
      cache_.put(key, buf);
      l_.read_.fetch_add(len);
    }
    bool last = offset_[i] + len == item.object.size;
    copier_.submit(slot, item.destination, offset_[i], buf, [this, i, len, last] {
      l_.loaded_.fetch_add(len);
      if (!last) return;
      for (const Watch& w : l_.watches_) {
        if (w.entry_of[i] < 0) continue;
        cow::Entry& e = w.table->entry(static_cast<std::uint32_t>(w.entry_of[i]));
        e.state.store(cow::kDone, std::memory_order_release);
        cow::futex_wake_all(&e.state);
      }
    });
    offset_[i] += len;
    if (last) {
      done_[i] = true;  // nothing more to read; the copier marks it done once written
      --remaining_;
    }
    return ok();
  }

  Loader& l_;
  PieceCache& cache_;
  const std::string checkpoint_;
  Copier copier_;
  BackgroundScope scope_;
  const Pace pace_;
  std::vector<std::uint64_t> offset_;  // bytes of each region loaded so far
  std::vector<bool> done_;
  std::size_t in_order_ = 0;  // the next region in the given order
  std::size_t remaining_;
  std::set<Piece> asked_;
};

Status Loader::load_all() {
  GCR_TRY_ASSIGN(Gpu * gpu, Gpu::get());
  // Concurrent restores of this checkpoint read each piece once between them.
  const std::string checkpoint = reader_->manifest().id.hex();
  PieceCache& cache = PieceCache::instance();
  cache.join(checkpoint);
  struct Leave {
    PieceCache& c;
    const std::string& id;
    ~Leave() { c.leave(id); }
  } leave{cache, checkpoint};
  return Pass(*this, *gpu, cache, checkpoint).run();
}

}  // namespace gcr::gcrd
