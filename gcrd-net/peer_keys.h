// The keys of gcrd-net (docs/security.md, "Network"): one token every host shares, or a key per
// peer, each with the users its processes may be.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "gcr/result.h"

namespace gcr::gcrd {

// Note [Per-peer keys]
// A token file is either one bare token, which every peer holds alike (the form of gcrd-net/2), or
// one line per peer:
//
//   # comments and blank lines are ignored
//   peer NAME SECRET [allow-uids=LIST]
//
// NAME is [A-Za-z0-9._-], 64 at most; SECRET at least 32 characters. On the server, each peer
// proves its own SECRET, under its NAME (sent in the first line, key=NAME; a NAME the server does
// not know is refused as a wrong token, so names cannot be probed), and what it may restore is
// limited to the uids of its allow-uids= (Note [Who a peer may run]), else to gcrd's --allow-uids.
// Each named peer also has a store of its own, <served store>/peers/NAME, for its pushes, stages
// and restores: peers never read, replace or restore each other's checkpoints. So one host's key
// is revoked by removing its line and restarting gcrd, and a peer trusted with one user's jobs
// cannot have a process restored as root. A client's file holds its own key: a bare token, or
// exactly one peer line.
struct NetKey {
  std::string name;                           // empty: the bare token
  std::string secret;                         // HMAC key of the handshake (never sent)
  std::optional<std::set<uid_t>> allow_uids;  // server side: this peer's users, if it names them
};

struct PeerKeys {
  std::vector<NetKey> keys;  // one unnamed key (a bare token), or named ones
  // The key a client named (empty: the bare token); null when there is none.
  const NetKey* find(std::string_view name) const;
};

// The text of a token file, parsed; `what` names it in errors.
Result<PeerKeys> parse_peer_keys(std::string_view text, const std::string& what);

// A token file read and parsed. For a server (gcrd), the file must be its user's and mode 0600; a
// client's must hold one key.
Result<PeerKeys> read_peer_keys(const std::filesystem::path& path);
Result<NetKey> read_client_key(const std::filesystem::path& path);

}  // namespace gcr::gcrd
