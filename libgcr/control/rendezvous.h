// Where a caller and a process's agent thread meet (docs/protocol.md §2, §8): the caller listens
// on a fresh abstract unix socket with a random name, the process connects to it, and each side
// checks who the other is with SO_PEERCRED. This file owns the sockets and the credential rules;
// the mailbox that carries the name is mailbox.cpp's.
//
// Note [Peer pids across pid namespaces]
// The caller names the target by the pid it sees (its own pid namespace). SO_PEERCRED reports the
// peer's pid translated into the namespace of the process that asks, so the two are equal whenever
// the caller can see the target at all -- gcr on the host controlling a process restored inside a
// child pid namespace included -- and a peer invisible to the caller reads as pid 0, which never
// matches. So the caller's check is plain equality with the pid it used, nothing more. Abstract
// sockets live in a network namespace: the caller listens in the process's (Note [Rendezvous in the
// process's network namespace]).
//
// Note [Rendezvous in the process's network namespace]
// A process in a container (runc, podman, `unshare -n`) has a network namespace of its own, where
// an abstract name bound on the host does not exist. The caller creates its listening socket from
// a thread that entered the process's network namespace (setns, CAP_SYS_ADMIN): a socket stays in
// the namespace it was created in, so the rest of the caller never leaves its own. A caller without
// that right, or a process sharing the caller's namespace, listens where it is.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <string_view>

#include "channel.h"
#include "gcr/result.h"
#include "gcr/unique_fd.h"

namespace gcr::control {

inline constexpr std::string_view kRendezvousPrefix = "gcr-rv-";

// "gcr-rv-" followed by 32 lowercase hex digits.
bool is_rendezvous_name(std::string_view name) noexcept;

struct PeerCred {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};
// The credentials of the process at the other end of a connected unix socket.
Result<PeerCred> peer_cred(int socket);

// The caller's listening socket. Move-only; closing it removes the name.
class Rendezvous {
 public:
  // Listens on "@gcr-rv-<128 random bits>" (close-on-exec, backlog 4), in the network namespace
  // of process `peer` when that is not the caller's (0: the caller's).
  static Result<Rendezvous> listen(pid_t peer = 0);

  const std::string& name() const noexcept { return name_; }

  // Accepts the connection of process `pid` (Note [Peer pids across pid namespaces]) before the
  // deadline. Connections from any other process are closed and ignored. `still_waiting` runs
  // about every 50 ms; an error it returns ends the wait with that error.
  Result<UniqueFd> accept_from(pid_t pid, Deadline deadline,
                               const std::function<Status()>& still_waiting);

 private:
  UniqueFd socket_;
  std::string name_;
};

// The process's side: connects to the abstract socket `name` without blocking (a full backlog is
// an error, not a wait). The socket is close-on-exec and non-blocking.
Result<UniqueFd> connect_rendezvous(std::string_view name);

// The server's rule: root, or the uid the process runs as.
bool caller_allowed(uid_t caller_uid, uid_t process_uid) noexcept;

}  // namespace gcr::control
