// The gcr-control mailbox (docs/protocol.md §2): a 4 KiB memfd in the managed process, through
// which a caller asks the process's agent thread to connect to the caller's rendezvous socket.
// This file owns its layout, its creation and mapping, and the shared-futex calls on it; it knows
// nothing of sockets or messages.
//
// Note [Why a mailbox]
// A listening socket in the process would be dumped by CRIU and restored under the same name, so a
// restore while the original runs, or two restores of one image, would collide ("address in
// use"); a socket connected to gcr would make CRIU's dump fail (an external peer). A memfd has no
// name to collide on: CRIU restores it as a fresh private file in each restored copy. It is found
// through /proc/<pid>/fd, which takes ptrace-level access (root or the owner), the same right
// checkpointing needs. The process keeps no socket between sessions.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "gcr/control.h"
#include "gcr/result.h"
#include "gcr/unique_fd.h"

namespace gcr::control {

inline constexpr char kMailboxName[] = "gcr-control";  // /proc/<pid>/fd/N -> "/memfd:gcr-control"
inline constexpr std::uint32_t kMailboxMagic = 0x43524347;  // "GCRC" as bytes
inline constexpr std::uint16_t kMailboxMajor = 1;
inline constexpr std::uint16_t kMailboxMinor = 0;
inline constexpr std::size_t kMailboxBytes = 4096;
inline constexpr std::size_t kRendezvousMaxBytes = 107;  // sun_path less the leading NUL
inline constexpr std::size_t kMailboxMessageBytes = 256;

// Shared between the processes that map it; host byte order (both ends are on one machine).
struct MailboxLayout {
  std::uint32_t magic;                      // 0    kMailboxMagic
  std::uint16_t major;                      // 4    kMailboxMajor
  std::uint16_t minor;                      // 6    kMailboxMinor
  std::atomic<std::uint32_t> request_seq;   // 8    the caller bumps it (futex word)
  std::atomic<std::uint32_t> response_seq;  // 12   the server sets it to the request it handled
  std::int32_t result;                      // 16   Errc of that request; 0: the server connected
  std::uint32_t caller_pid;                 // 20   the lock holder, in its own pid namespace
  std::uint32_t rendezvous_bytes;           // 24   length of rendezvous
  std::uint32_t reserved;                   // 28   zero
  char rendezvous[112];                     // 32   abstract socket name, without the leading NUL
  char message[kMailboxMessageBytes];       // 144  when result != 0: why, NUL-terminated
};                                          // 400 bytes; the rest of the page is zero
static_assert(sizeof(MailboxLayout) == 400);
static_assert(sizeof(MailboxLayout) <= kMailboxBytes);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<std::uint32_t>) == 4);

// A MAP_SHARED mapping of one mailbox; unmapped when destroyed.
class MailboxMap {
 public:
  MailboxMap() = default;
  MailboxMap(MailboxMap&& o) noexcept : box_(o.release()) {}
  MailboxMap& operator=(MailboxMap&& o) noexcept;
  ~MailboxMap() { reset(); }

  // Maps the mailbox memfd `fd` (read-write).
  static Result<MailboxMap> map(int fd);

  MailboxLayout* get() const noexcept { return box_; }
  MailboxLayout* operator->() const noexcept { return box_; }
  MailboxLayout* release() noexcept;
  void reset() noexcept;

 private:
  MailboxLayout* box_ = nullptr;
};

// A new mailbox: memfd "gcr-control" (close-on-exec), 4 KiB, sealed against resizing (a caller
// that truncated it would crash the process with SIGBUS), initialized with magic and version.
// On success *map holds the server's mapping.
Result<UniqueFd> create_mailbox(MailboxMap* map);

// Checks a mapped mailbox's magic and version before a caller trusts its layout.
Status check_mailbox(const MailboxLayout& box, pid_t pid);

// FUTEX_WAIT on a shared word while it holds `expected`; wakes for FUTEX_WAKE, a signal, or after
// timeout_ms (negative: no timeout). Spurious wake-ups are allowed: callers re-check.
void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected, int timeout_ms) noexcept;
// Wakes every waiter on a shared word.
void futex_wake(std::atomic<std::uint32_t>* word) noexcept;

}  // namespace gcr::control
