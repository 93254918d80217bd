// How two gcrds (or gcr and a gcrd) prove to each other that they hold the network token, without
// either revealing it (docs/protocol.md §14, Note [Proving the token]).
#pragma once

#include <chrono>
#include <string>

#include "gcr/result.h"
#include "net_tls.h"
#include "peer_keys.h"

namespace gcr::gcrd {

inline constexpr char kNetProtocol[] = "gcrd-net/3";

// Note [Proving the token]
// gcrd-net/1 sent the token itself, in clear, as the first line, to whoever answered: a user who
// bound the port while gcrd was down, or anyone on the path, got root's credential and could
// replay it. gcrd-net/2 sends only proofs, each an HMAC-SHA256 keyed by the token over both sides'
// fresh 256-bit nonces:
//
//   client: gcrd-net/3 <verb> nonce=<Nc> [key=<name>]
//   server: challenge nonce=<Ns> proof=<HMAC(token, "gcrd-net/3 server <verb> <name> <Nc> <Ns>")>
//   client: proof=<HMAC(token, "gcrd-net/3 client <verb> <name> <Nc> <Ns>")>
//
// (token: the peer's key, Note [Per-peer keys] in peer_keys.h; <name> its name, "-" for a bare
// token)
//
// The server proves first, so a client reveals nothing to a peer that does not hold the token: it
// checks the server's proof and hangs up on a wrong one. Neither proof can stand in for the other
// (the role is in what is signed), and a recorded client proof is worth nothing on a later
// connection (the server's nonce is new each time): a capture cannot be replayed, nor a server's
// proof reflected. gcrd-net/3 adds a session key derived the same way, HMAC(token,
// "gcrd-net/3 tls <verb> <Nc> <Ns>"), never sent, and everything after the handshake runs in TLS
// keyed by it (Note [An encrypted channel] in net_tls.h): a peer that did not prove the token
// cannot read, change or take over the connection.

// Client: the handshake on a connected `fd`, each answer awaited until `deadline`; the key for
// the TLS that follows.
// `plaintext`: ask for no TLS after it (GCR_NET_PLAINTEXT, a benchmark hook).
Result<SessionKey> prove_token(int fd, const NetKey& token, const std::string& verb,
                               std::chrono::steady_clock::time_point deadline,
                               bool plaintext = false);

struct TokenProven {
  std::string verb;                                // "store", "memory" or "request"
  SessionKey key;                                  // for start_tls
  std::chrono::steady_clock::time_point deadline;  // what is left of the handshake's limit
  const NetKey* peer = nullptr;                    // the key it proved (in the PeerKeys given)
  bool plaintext = false;                          // no TLS follows (both ends' benchmark hook)
};

// Server: the handshake, whole within `limit` (a peer that drips it a byte at a time holds a slot
// no longer); the client's verb, or an error (the client told why, but for a wrong proof).
// A client's "tls=0" is refused unless `allow_plaintext` (this gcrd's GCR_NET_PLAINTEXT).
Result<TokenProven> check_token_proof(int fd, const PeerKeys& keys, std::chrono::milliseconds limit,
                                      bool allow_plaintext = false);

}  // namespace gcr::gcrd
