// How two gcrds (or gcr and a gcrd) prove to each other that they hold the network token, without
// either revealing it (docs/protocol.md §14, Note [Proving the token]).
#pragma once

#include <chrono>
#include <string>

#include "gcr/result.h"

namespace gcr::gcrd {

inline constexpr char kNetProtocol[] = "gcrd-net/2";

// Note [Proving the token]
// gcrd-net/1 sent the token itself, in clear, as the first line, to whoever answered: a user who
// bound the port while gcrd was down, or anyone on the path, got root's credential and could
// replay it. gcrd-net/2 sends only proofs, each an HMAC-SHA256 keyed by the token over both sides'
// fresh 256-bit nonces:
//
//   client: gcrd-net/2 <verb> nonce=<Nc>
//   server: challenge nonce=<Ns> proof=<HMAC(token, "gcrd-net/2 server <verb> <Nc> <Ns>")>
//   client: proof=<HMAC(token, "gcrd-net/2 client <verb> <Nc> <Ns>")>
//
// The server proves first, so a client reveals nothing to a peer that does not hold the token: it
// checks the server's proof and hangs up on a wrong one. Neither proof can stand in for the other
// (the role is in what is signed), and a recorded client proof is worth nothing on a later
// connection (the server's nonce is new each time): a capture cannot be replayed, nor a server's
// proof reflected. What follows the handshake is in clear and not itself authenticated: an
// attacker who can rewrite packets on the path can still take over a connection once it is made
// (docs/security.md, Limits).

// Client: the handshake on a connected `fd`, each answer awaited until `deadline`.
Status prove_token(int fd, const std::string& token, const std::string& verb,
                   std::chrono::steady_clock::time_point deadline);

// Server: the handshake, whole within `limit` (a peer that drips it a byte at a time holds a slot
// no longer); the client's verb, or an error (the client told why, but for a wrong proof).
Result<std::string> check_token_proof(int fd, const std::string& token,
                                      std::chrono::milliseconds limit);

}  // namespace gcr::gcrd
