// The soft copy-on-write table (docs/protocol.md §10): shared memory between gcrd and a process
// that runs on while gcrd still reads the checkpoint's device memory.
//
// Note [Soft copy-on-write]
// A checkpoint with --leave-running gives the process its memory back before gcrd has read it.
// Each region gcrd still has to store gets an entry here, and its state says who may touch it:
//
//   pending --(gcrd claims it)--> reading --(bytes staged in gcrd)--> done
//   pending --(the process is about to write it)--> copying --(private copy made)--> copied
//   copied --(gcrd took the copy: cow_take)--> done
//
// Both sides move an entry out of `pending` with a compare-and-swap, so exactly one of them
// wins. The process writes a region only when its entry is `copied` or `done` (or it has none):
// a write that finds it `pending` first copies the region device-to-device into memory of its
// own, and a write that finds it `reading` or `copying` waits on the state word (a shared futex)
// until the other side is finished. gcrd never reads a region the process may be writing: it
// reads the original only while it holds it in `reading`, and otherwise the process's copy,
// which nothing writes. When the process cannot allocate a copy it raises `wanted` and waits:
// gcrd reads wanted entries first. gcrd may hand the table over with entries already `reading`: a
// job's shared allocations, one entry per view (Note [Shared memory behind every view] in
// daemon/drain.h); the process waits for those, never copies them.
//
// Note [Copies handed over]
// A copy the process made lives in the process: were it taken only when gcrd gets to its entry
// (cow_take), a process that exits first (a job that ends while its last checkpoint is still
// being stored) would take the copy with it, and the checkpoint would be lost. From protocol 1.6
// gcrd sends, with cow_begin, one end of a socket pair (SOCK_SEQPACKET) of its own; the process
// sends each copy on it as soon as it is made (a HandoverMessage with the copy's fd, SCM_RIGHTS,
// without waiting), drops its own reference, and only then marks the entry `copied`. A file
// descriptor in flight on a unix socket is held by the socket, not by its sender: once the send
// returned, the copy outlives the process, even one killed. gcrd reads the socket before it asks
// for a copy with cow_take. A send that fails (the socket full) keeps the copy in the process for
// cow_take, as before 1.6. An entry a process that died left `copying` holds its original
// unwritten (the process writes only after `copied`): gcrd reads the original.
//
// Note [On-demand restore] is the same table with kind kLoad: see TableKind.
//
// The table is a memfd made by gcrd and handed over with the control protocol's cow_begin; both
// sides map it shared. The layout is fixed (little-endian, naturally aligned) and versioned.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace gcr::cow {

inline constexpr std::uint32_t kTableMagic = 0x57434347;  // "GCCW" as bytes
inline constexpr std::uint32_t kTableVersion = 1;
inline constexpr std::uint32_t kMaxEntries = 1u << 19;  // the control protocol's region limit

// Values are fixed: both sides of the table use them.
enum State : std::uint32_t {
  kPending = 1,  // nobody has touched the region since the cut
  kReading = 2,  // gcrd is reading the original; the process waits before writing
  kCopying = 3,  // the process is copying it; gcrd waits for the copy
  kCopied = 4,   // the process's copy holds the cut's bytes; the original is the process's again
  kDone = 5,     // gcrd has the cut's bytes; nothing more to do for this region
};

// What the table guards. copy_on_write: a checkpoint's drain; the process waits (or copies) before
// it *writes* an entry's region. load: an on-demand restore; the regions are being loaded, and the
// process waits before it *touches* (reads or writes) a region whose entry is not done: it sets
// `wanted`, and gcrd loads that one next. Entries of a load table are only ever pending, reading
// (loading) or done; the process never copies.
enum TableKind : std::uint32_t { kCopyOnWrite = 0, kLoad = 1 };

struct TableHeader {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint32_t count;     // entries that follow
  std::uint32_t gcrd_pid;  // informational
  std::uint32_t kind;      // TableKind
  std::uint32_t reserved0;
  std::uint64_t reserved1;
};
static_assert(sizeof(TableHeader) == 32);

struct Entry {
  std::uint64_t address;  // the region, as in the park
  std::uint64_t size;
  std::uint32_t device;
  std::atomic<std::uint32_t> state;   // State; a futex word
  std::atomic<std::uint32_t> wanted;  // 1: the process waits for gcrd to read this one
  std::uint32_t reserved;
};
static_assert(sizeof(Entry) == 32);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

// One copy handed over (Note [Copies handed over]): sent with exactly one fd, the copy exported.
struct HandoverMessage {
  std::uint32_t index;  // the table entry
  std::uint32_t reserved;
  std::uint64_t size;
};
static_assert(sizeof(HandoverMessage) == 16);

constexpr std::size_t table_bytes(std::uint32_t count) {
  return sizeof(TableHeader) + std::size_t{count} * sizeof(Entry);
}

inline Entry* entries(TableHeader* h) {
  return reinterpret_cast<Entry*>(reinterpret_cast<std::byte*>(h) + sizeof(TableHeader));
}

// Shared (not process-private) futex calls on a state word. wait returns on a wake, a change of
// the word, a signal or the timeout; callers loop on the state.
void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                std::chrono::milliseconds timeout) noexcept;
void futex_wake_all(std::atomic<std::uint32_t>* word) noexcept;

}  // namespace gcr::cow
