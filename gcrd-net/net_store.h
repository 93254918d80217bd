// gcrd's network side (docs/protocol.md §14): another host's gcr reaches this gcrd over TCP, with a
// shared token, to write checkpoints into the store this gcrd serves and to ask it for restores:
// what `gcr migrate` needs of its destination.
//
//   connection:  "gcrd-net/3 <store|memory|request> nonce=<Nc>\n", then the proofs of the token
//                (Note [Proving the token] in net_handshake.h), then TLS 1.3 keyed by them
//   store:       a Backend (gcr/store_backend.h) over the connection, one operation at a time:
//                "<op> key=value ...\n" [payload of len= bytes] -> "ok key=value ...\n" [payload]
//                or "error <errc> <message>\n"
//   memory:      the same, on the gcrd's peer memory tier (daemon/memory_tier.h)
//   request:     one gcrd/1 request (gcrd_protocol.h), on the served store only
//
// Note [Network trust]
// The token (or a peer's own key, Note [Per-peer keys] in peer_keys.h) is the whole
// authentication, proven without being sent (Note [Proving the token]): whoever holds it may read
// and write the served store
// (gcr image push/pull gcr://HOST:PORT, gcr migrate) and restore what it holds as gcrd's user
// (root, normally). So the token file must be as private as root's keys (0600, root-owned: gcrd
// refuses a token file others can read), the comparison takes the same time whatever matches, and
// nothing on the connection names a path on this host: the served store is gcrd's choice (--store),
// store keys are checked against the store's own names, and a request's store= field is replaced.
// Everything after the handshake is encrypted and authenticated (Note [An encrypted channel] in
// net_tls.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "gcr/result.h"
#include "gcr/store_backend.h"
#include "gcr/unique_fd.h"
#include "peer_keys.h"

namespace gcr::gcrd {

// Note [A peer that stops answering]
// A host that goes away without a word (powered off, a link cut, a partition) sends no reset: a
// socket waiting on it waits for ever, and gcr migrate may hold a stopped process meanwhile. Every
// gcrd-net connection, on both sides, so has TCP keepalive and TCP_USER_TIMEOUT set: data left
// unacknowledged, or an idle connection whose probes go unanswered, fails with ETIMEDOUT after
// net_timeout() (Settings::net_timeout: $GCR_NET_TIMEOUT_MS, default 15 s). A peer that is alive
// answers the probes, so a long request (a restore loading GBs) is never cut short. Connecting is
// bounded by it as well.
std::chrono::milliseconds net_timeout();
void watch_peer(int fd);

// "HOST:PORT" (an IPv4 address or a name; [v6]:port) -> a connected TCP socket, close-on-exec,
// TCP_NODELAY, watched (watch_peer), after the handshake that proves the token (net_handshake.h). A
// connection refused (the host answers, nothing listens) is not_found; a host that cannot be
// reached, or does not answer within net_timeout(), is unreachable.
Result<UniqueFd> net_connect(const std::string& address, const NetKey& token,
                             const std::string& verb);

// Asks the gcrd at `address` to stage checkpoint `name` on its GPU (Note [Staged restore] in
// staged.h); returns the bytes it loaded (regions an earlier stage left unchanged are kept).
Result<std::uint64_t> net_stage(const std::string& address, const NetKey& token,
                                const std::string& name);

// Asks the gcrd at `address` to remove the job part `id` from its store (verb tier op=remove: a
// checkpoint of a schedule beyond its --keep, of a Slurm job gcr slurm forgets).
Status remove_remote_part(const std::string& address, const std::string& id, const NetKey& key);

// The destination's store as a Backend (`parallelism` connections at most): the store it serves,
// or its peer memory tier (connection verb "memory": Note [Checkpoints in peers' memory] in
// daemon/memory_tier.h).
enum class NetStore { served, memory };
Result<std::unique_ptr<store::Backend>> open_net_backend(const std::string& address,
                                                         const NetKey& token,
                                                         NetStore which = NetStore::served);

// Server: the handshake of net_handshake.h and then TLS (net_tls.h), whole within `limit` (a peer
// that drips it a byte at a time holds a slot no longer than that); returns the verb ("store" or
// "request") and the plain end of the encrypted channel, or an error (after telling the client
// why, where it is told).
struct NetChannel {
  std::string verb;
  UniqueFd fd;
  const NetKey* peer = nullptr;  // the key the peer proved, one of those given
};
Result<NetChannel> net_accept(UniqueFd fd, const PeerKeys& keys,
                              std::chrono::milliseconds limit = std::chrono::seconds(10));

// Server: serves Backend operations on `fd` from `store` until the client hangs up.
void serve_net_store(int fd, store::Backend& store);

}  // namespace gcr::gcrd
