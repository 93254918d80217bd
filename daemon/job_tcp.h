// TCP connections a checkpoint carries: both ends held by the processes it takes (one tree, or
// the trees of a job), so that CRIU dumps each end with its bytes in flight (--tcp-established)
// and a restore brings both back.
//
// Note [TCP within a job]
// - Which connections: an established (or closing) TCP connection whose two ends are sockets of
//   the checkpointed processes, in one network namespace (the tree's), IPv4. A connection to
//   anything else is still refused before anything stops (or closed, with --tcp-close): its far
//   end would see the restored one as a stranger.
// - Both ends frozen, the network locked: CRIU dumps a job's trees one after the other, and
//   with the processes frozen the kernel still moves queued bytes between their sockets, so a
//   byte could be acknowledged by the receiver after the sender's dump and missing from the
//   receiver's (taken before): lost. So gcrd locks the connections itself (tcp_lock.h: packets of
//   both directions dropped) from before the first dump until every tree is dumped, and tells
//   CRIU not to (--network-lock skip). A dropped packet is sent again by TCP once the lock goes.
// - The trees a dump leaves stopped hold their sockets in TCP repair mode (CRIU turns it off only
//   for a task it lets run): gcrd turns it off (through pidfd_getfd) before they go on, after the
//   lock is gone so that the window probe the kernel sends then gets through.
// - The restore locks the same connections before the first tree's CRIU and unlocks them after
//   the last, so that no end sends (and is answered by a reset) before its peer exists.
// - META job_tcp records them, one per line: "LOCAL REMOTE" (IPv4 address:port, as the first end
//   sees them).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gcr/process_tree.h"
#include "gcr/result.h"
#include "gcr/tcp_lock.h"

namespace gcr::gcrd {

using criu::parse_tcp_address;
using criu::RepairedSockets;
using criu::TcpAddress;
using criu::TcpConnection;
using criu::TcpEnd;
using criu::TcpLock;

struct CarriedTcp {
  std::vector<TcpConnection> connections;
  std::vector<TcpEnd> ends;
  bool empty() const { return connections.empty(); }
};

// Finds the TCP connections whose two ends `files` hold (ProcessTree::files of every tree of the
// job), marks those files as not external, and returns them.
CarriedTcp carry_tcp_within(std::vector<std::vector<criu::OpenFile>*> files);

// The TCP connections of `files` still external (their far end is not among them): for the other
// hosts of a job to match (Note [A job across hosts] in job_link.h).
std::vector<TcpConnection> outward_tcp(
    const std::vector<const std::vector<criu::OpenFile>*>& files);
// Carries `listed` (connections of outward_tcp the job holds at both ends) as carry_tcp_within
// does, adding them to `into`.
void carry_listed(std::vector<std::vector<criu::OpenFile>*> files,
                  const std::vector<TcpConnection>& listed, CarriedTcp& into);

std::string encode_job_tcp(const std::vector<TcpConnection>& connections);
Result<std::vector<TcpConnection>> decode_job_tcp(const std::string& text);

// CRIU's dump and restore arguments for carried connections.
std::vector<std::string> tcp_criu_arguments();

}  // namespace gcr::gcrd
