// Pieces of device memory that concurrent restores of one checkpoint share (scale-out of one
// image: each chunk is read from the store once). A loader asks for a piece before reading it:
// another loader of the same checkpoint may have it, or be reading it right now (then this one
// waits for it rather than reading it too). Pieces are kept only while two or more loaders of a
// checkpoint run, at most GCR_PIECE_CACHE_MIB (default 1024) of them, least recently used first
// out; a lone loader only marks the piece it is reading, which costs no copy.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <vector>

namespace gcr::gcrd {

class PieceCache {
 public:
  struct Key {
    std::string checkpoint;  // id
    std::string owner;       // the region's process in a job (its object name)
    std::uint64_t address = 0;
    std::uint64_t offset = 0;
    auto operator<=>(const Key&) const = default;
  };

  static PieceCache& instance();

  // A loader of `checkpoint` starts / ends.
  void join(const std::string& checkpoint);
  // Whether no other loader of `checkpoint` has joined (nobody waits for this one's pieces).
  bool alone(const std::string& checkpoint);
  void leave(const std::string& checkpoint);

  enum class Outcome { copied, read_it };
  // copied: `out` holds the piece (from another loader). read_it: the caller reads it and then
  // calls put() (or abandon() on failure); while it does, other loaders of the piece wait.
  Outcome get_or_claim(const Key& key, std::span<std::byte> out);
  void put(const Key& key, std::span<const std::byte> bytes);
  void abandon(const Key& key);

 private:
  PieceCache();
  void evict_locked();

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, int> loaders_;
  struct Piece {
    std::vector<std::byte> bytes;
    bool ready = false;  // false: being read by the loader that claimed it
    std::list<Key>::iterator lru;
  };
  std::map<Key, Piece> pieces_;
  std::list<Key> lru_;  // front: most recently used
  std::uint64_t bytes_ = 0, capacity_ = 0;
};

}  // namespace gcr::gcrd
