// A rank restored on a replacement host keeps the addresses its peers know it by (Note [A job
// across hosts] in job_link.h, docs/jobs.md "Restore on another host").
//
// Note [Addresses that move with a rank]
// The connections of a restored rank are TCP repaired with their old four-tuples, and its peers
// keep sending to its old address. On the replacement host gcrd adds each such address (the local
// ends of the part's carried connections, META job_tcp) that the host does not have yet, as a /32
// on the interface whose subnet holds it (else the interface of the default route), before CRIU
// restores; then it announces the address with gratuitous ARP (three, 100 ms apart) so that the
// peers' neighbour caches point at this host at once instead of after their entries for the lost
// host time out. The old host must be gone (or the address off it): two hosts answering for one
// address is the operator's to prevent, as with any address takeover. The address stays on the
// replacement host for as long as the rank may use it; `ip addr del ADDRESS/32 dev DEV` removes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gcr/result.h"

namespace gcr::gcrd {

struct TakenAddress {
  std::uint32_t ip = 0;  // host order
  std::string device;
  bool added = false;  // false: the host had it already
};

// "10.0.0.2".
std::string address_text(std::uint32_t ip);

// Takes every address of `ips` (host order) not on this host yet (Note [Addresses that move with
// a rank]). Fails, having added nothing more, when an address has no interface to go on.
Result<std::vector<TakenAddress>> take_addresses(const std::vector<std::uint32_t>& ips);

// A rank that moves while its job runs (Note [A rank moved while its job runs] in job_move.h)
// takes its addresses along: each of `ips` must be its own, a /32 on this host (`whose` names
// the rank in the refusal).
Status check_own_addresses(const std::vector<std::uint32_t>& ips, const std::string& whose);
// Removes each of `ips` this host has; the removed ones come back with put_back_addresses (which
// logs, not returns, a failure: it is an undo).
Result<std::vector<TakenAddress>> release_addresses(const std::vector<std::uint32_t>& ips);
void put_back_addresses(const std::vector<TakenAddress>& released);

}  // namespace gcr::gcrd
