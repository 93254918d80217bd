// gcrd's lock on the TCP connections a checkpoint or restore carries (Note [TCP within a job] in
// daemon/job_tcp.h): every packet of theirs dropped, in both directions, in the network namespace
// of the processes, for as long as the lock is held; and the end of TCP repair mode on the sockets
// a dump left stopped.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gcr/result.h"
#include "gcr/unique_fd.h"

namespace gcr::criu {

struct TcpAddress {
  std::uint32_t ip = 0;  // host order
  std::uint16_t port = 0;
  bool operator==(const TcpAddress&) const = default;
  std::string text() const;  // "10.0.0.1:5000"
};
// "10.0.0.1:5000"; nullopt for anything else (IPv6 included).
std::optional<TcpAddress> parse_tcp_address(const std::string& text);

struct TcpConnection {
  TcpAddress local, remote;  // as the first end sees them
};

// A process's descriptor of a carried socket (each end may be held by several).
struct TcpEnd {
  pid_t pid = 0;
  int fd = -1;
};

class TcpLock {
 public:
  TcpLock() = default;
  TcpLock(TcpLock&& other) noexcept { *this = std::move(other); }
  TcpLock& operator=(TcpLock&& other) noexcept;
  ~TcpLock() { release(); }

  // Drops the connections' packets in the network namespace of process `in_netns_of` (an
  // iptables chain of gcrd's, jumped to first from INPUT and OUTPUT). Fails, locking nothing,
  // when iptables-restore is missing or refuses.
  static Result<TcpLock> engage(pid_t in_netns_of, const std::vector<TcpConnection>& connections);
  // Lets the packets through again and removes the chain (idempotent); a failure is logged to
  // stderr, not returned: it is an undo.
  void release();
  // Lets the packets through at once, leaving the chain for release() to remove: a rule that
  // returns first. iptables-nft adds a rule in ~3 ms but takes 10-20 ms (more on a busy machine)
  // to delete one or flush a chain (it reads the ruleset first), and the lock's end is in a
  // checkpoint's stall and a restore's resume; its removal need not be. Falls back to release().
  void open();
  bool engaged() const { return !chain_.empty(); }
  pid_t netns_pid() const { return netns_pid_; }
  const std::string& chain() const { return chain_; }
  // A lock engaged by another process (gcrd, for its keeper): release() removes it.
  static TcpLock adopt(pid_t netns_pid, std::string chain);

 private:
  pid_t netns_pid_ = 0;
  UniqueFd netns_;  // held from engage: the chain is removed after its processes are gone
  std::string chain_;
  bool open_ = false;
};

// The carried sockets of processes a dump left stopped, held by gcrd (pidfd_getfd) from before
// the dump, with the SO_REUSEADDR each had: end_repair() turns TCP repair mode off on each (the
// kernel then clears SO_REUSEADDR, which is set back).
class RepairedSockets {
 public:
  static Result<RepairedSockets> take(const std::vector<TcpEnd>& ends);
  // Note [A lock that drops nothing]
  // A packet the lock drops is sent again only when its sender's retransmission timer fires (200
  // ms at least): a job whose connections were locked with bytes unacknowledged would stall that
  // long after the checkpoint. With the ranks drained at the cut, what is left in flight is mostly
  // acknowledgements the kernel delays (up to 40 ms): so before locking, every delayed ACK is sent
  // now (TCP_QUICKACK), and the lock waits, up to `limit` (gcrd: 10 ms), until each socket has
  // everything it sent acknowledged (SIOCOUTQ 0). Past the limit it locks anyway: only the stall
  // is at stake. (nstat counted no retransmission over jobs.hosts' checkpoints.)
  void settle(std::chrono::milliseconds limit);
  void end_repair();

 private:
  struct Socket {
    UniqueFd fd;
    int reuse = 0;
  };
  std::vector<Socket> sockets_;
};

}  // namespace gcr::criu
