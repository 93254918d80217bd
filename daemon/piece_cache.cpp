// The piece cache (piece_cache.h).
#include "piece_cache.h"

#include <cstring>

#include "gcr/settings.h"

namespace gcr::gcrd {

PieceCache& PieceCache::instance() {
  static PieceCache* cache = new PieceCache();  // lives as long as gcrd
  return *cache;
}

PieceCache::PieceCache() {
  capacity_ = settings().piece_cache_bytes;  // GCR_PIECE_CACHE_MIB
}

void PieceCache::join(const std::string& checkpoint) {
  std::lock_guard lock(mu_);
  ++loaders_[checkpoint];
}

bool PieceCache::alone(const std::string& checkpoint) {
  std::lock_guard lock(mu_);
  auto l = loaders_.find(checkpoint);
  return l == loaders_.end() || l->second < 2;
}

void PieceCache::leave(const std::string& checkpoint) {
  std::lock_guard lock(mu_);
  if (--loaders_[checkpoint] > 0) return;
  loaders_.erase(checkpoint);
  // Nobody else will ask: drop its pieces (claimed ones stay until put or abandoned).
  for (auto it = pieces_.begin(); it != pieces_.end();) {
    if (it->first.checkpoint == checkpoint && it->second.ready) {
      bytes_ -= it->second.bytes.size();
      lru_.erase(it->second.lru);
      it = pieces_.erase(it);
    } else {
      ++it;
    }
  }
}

PieceCache::Outcome PieceCache::get_or_claim(const Key& key, std::span<std::byte> out) {
  std::unique_lock lock(mu_);
  for (;;) {
    auto it = pieces_.find(key);
    if (it == pieces_.end()) break;
    if (it->second.ready) {
      if (it->second.bytes.size() != out.size()) break;  // cannot happen for one checkpoint
      std::memcpy(out.data(), it->second.bytes.data(), out.size());
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return Outcome::copied;
    }
    cv_.wait(lock);  // another loader is reading it
  }
  // Claimed even by a lone loader (a marker, no bytes): one that joins while it reads waits for
  // the piece instead of reading it too.
  if (out.size() <= capacity_) {
    lru_.push_front(key);
    pieces_[key] = Piece{{}, false, lru_.begin()};
  }
  return Outcome::read_it;
}

void PieceCache::put(const Key& key, std::span<const std::byte> bytes) {
  std::lock_guard lock(mu_);
  auto it = pieces_.find(key);
  if (it == pieces_.end() || it->second.ready) return;
  auto l = loaders_.find(key.checkpoint);
  if (l == loaders_.end() || l->second < 2) {  // alone: nobody will ask for it
    lru_.erase(it->second.lru);
    pieces_.erase(it);
    cv_.notify_all();
    return;
  }
  it->second.bytes.assign(bytes.begin(), bytes.end());
  it->second.ready = true;
  bytes_ += bytes.size();
  evict_locked();
  cv_.notify_all();
}

void PieceCache::abandon(const Key& key) {
  std::lock_guard lock(mu_);
  auto it = pieces_.find(key);
  if (it == pieces_.end() || it->second.ready) return;
  lru_.erase(it->second.lru);
  pieces_.erase(it);
  cv_.notify_all();  // a waiter reads it itself
}

void PieceCache::evict_locked() {
  auto it = lru_.end();
  while (bytes_ > capacity_ && it != lru_.begin()) {
    --it;
    auto p = pieces_.find(*it);
    if (p == pieces_.end() || !p->second.ready) continue;
    bytes_ -= p->second.bytes.size();
    pieces_.erase(p);
    it = lru_.erase(it);
  }
}

}  // namespace gcr::gcrd
