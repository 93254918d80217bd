// Encryption of a gcrd-net connection once the token is proven (docs/protocol.md §14).
#pragma once

#include <array>
#include <chrono>

#include "gcr/result.h"
#include "gcr/unique_fd.h"

namespace gcr::gcrd {

// Note [An encrypted channel]
// gcrd-net/2 authenticated the two ends and left what followed in clear and unauthenticated. From
// gcrd-net/3 on, the proof of the token (Note [Proving the token]) also gives both sides a session
// key, HMAC(token, "gcrd-net/3 tls <verb> <Nc> <Ns>"), never sent, fresh for each connection; the
// two sides then run TLS 1.3 over the connection with that key as an external pre-shared key
// (RFC 8446 §2.2, mode psk_dhe_ke: an ephemeral X25519 exchange as well, so a token that leaks
// later does not open recorded sessions), with the one cipher suite TLS_AES_128_GCM_SHA256 and no
// certificates. Every byte after the handshake is encrypted and authenticated: a peer that cannot
// derive the key fails the TLS handshake, and a byte changed on the path ends the connection.
//
// The callers of gcrd-net read and write a plain socket (requests, the store protocol, image
// archives): rather than teach each of them TLS, start_tls hands back one end of a socket pair
// and a relay thread carries bytes between its other end and TLS, in both directions, until either
// side closes. This kernel has no kTLS for the socket to do it itself. The relay costs a copy of
// every byte and a thread per connection; bench/net_handshake_bench.py and migrate_bench measure
// it.
using SessionKey = std::array<unsigned char, 32>;

enum class TlsRole { client, server };

// Runs the TLS handshake on `connection` (a connected TCP socket) before `deadline`, then returns
// the plain end of the relay; the relay owns `connection` from then on and closes it when either
// side is done. A wrong key, a peer that does not speak TLS, or the deadline: an error, and the
// connection closed.
Result<UniqueFd> start_tls(UniqueFd connection, TlsRole role, const SessionKey& key,
                           std::chrono::steady_clock::time_point deadline);

}  // namespace gcr::gcrd
