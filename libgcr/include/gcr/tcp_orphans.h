// Connections a killed run left behind, ended before a restore carries them again.
//
// Note [Connections a killed run left behind]
// A rank killed while its peer was unreachable (the peer's host lost) leaves its TCP connections
// behind as orphans: no process holds them, but with bytes unacknowledged they stay, in FIN-WAIT-1
// retransmitting for minutes. A restore that carries the same connection (the same two addresses
// and ports) then cannot take its 4-tuple again: CRIU fails with "Can't connect inet socket
// back: Cannot assign requested address". So before CRIU restores the connections of a job,
// gcrd ends every orphan with one of their 4-tuples in the namespace, as `ss -K` does (sock_diag's
// SOCK_DESTROY). A socket a process still holds (its inode is not 0) is left alone: that is a real
// conflict, and CRIU's error stands.
#pragma once

#include <vector>

#include "gcr/result.h"
#include "gcr/tcp_lock.h"

namespace gcr::criu {

// Ends the orphaned sockets of `connections` (either direction) in this network namespace;
// returns how many. An error only when sock_diag cannot be asked (a kernel without it).
Result<unsigned> end_orphaned_connections(const std::vector<TcpConnection>& connections);

}  // namespace gcr::criu
