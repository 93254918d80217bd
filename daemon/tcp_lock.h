// gcrd's lock on the TCP connections a checkpoint or restore carries (Note [TCP within a job] in
// job_tcp.h): every packet of theirs dropped, in both directions, in the network namespace of
// the processes, for as long as the lock is held; and the end of TCP repair mode on the sockets
// a dump left stopped.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "gcr/result.h"
#include "gcr/unique_fd.h"
#include "job_tcp.h"

namespace gcr::gcrd {

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
  // Lets the packets through again (idempotent); a failure is logged to stderr, not returned:
  // it is an undo.
  void release();
  bool engaged() const { return !chain_.empty(); }

 private:
  pid_t netns_pid_ = 0;
  std::string chain_;
};

// The carried sockets of processes a dump left stopped, held by gcrd (pidfd_getfd) from before
// the dump, with the SO_REUSEADDR each had: end_repair() turns TCP repair mode off on each (the
// kernel then clears SO_REUSEADDR, which is set back).
class RepairedSockets {
 public:
  static Result<RepairedSockets> take(const std::vector<TcpEnd>& ends);
  void end_repair();

 private:
  struct Socket {
    UniqueFd fd;
    int reuse = 0;
  };
  std::vector<Socket> sockets_;
};

}  // namespace gcr::gcrd
