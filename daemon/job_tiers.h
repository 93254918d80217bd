// Note [Checkpoints in peers' memory] (memory_tier.h), the job's side: where each part's copies
// go (the ring), having the holders pull them once the job's checkpoint is committed, and where a
// restore finds a part again, fastest first.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "gcr/result.h"
#include "gcr/store_backend.h"
#include "peer_keys.h"

namespace gcr::gcrd {

// `--peer-copies m` of a job's checkpoint, and where it stands in its series.
struct PeerCopyOptions {
  unsigned copies = 0;       // m (0: none)
  std::string self_address;  // this gcrd's --listen: the holders pull the coordinator's part there
  std::string series;        // the checkpoints' name (NAME of NAME.N); empty: the checkpoint's name
  std::uint64_t seq = 0;     // N
  std::uint64_t protect = 0;  // the series' newest checkpoint whose every copy was made
  std::uint64_t oldest = 0;   // the series' oldest checkpoint still kept
};

// Whether HOST:PORT is an address other hosts can connect to (not empty, 0.0.0.0 or [::]).
bool reachable_address(const std::string& address);

// The job's gcrds (the coordinator's first, then the manifest's parts in order): host i's part is
// held by hosts i+1 .. i+m (mod n). An error when m is not below n.
Result<std::map<std::string, std::vector<std::string>>> ring_holders(
    const std::vector<std::string>& hosts, unsigned m);

// META peer_copies: one line per part, "PART_HOST HOLDER[,HOLDER...]".
std::string encode_peer_copies(const std::map<std::string, std::vector<std::string>>& holders);
std::map<std::string, std::vector<std::string>> decode_peer_copies(const std::string& text);

struct PeerCopiesReport {
  unsigned made = 0, wanted = 0;
  std::uint64_t copied_bytes = 0;
  std::vector<std::string> errors;  // one per copy not made, saying why
};

// Asks every holder to pull its parts (`parts`: host -> the id of its part), all at once, and
// waits for them.
PeerCopiesReport copy_to_peers(const std::map<std::string, std::string>& parts,
                               const std::map<std::string, std::vector<std::string>>& holders,
                               const PeerCopyOptions& options, const NetKey& key,
                               const Progress& progress);

// Where a restore may read the part of `host`, fastest first: this host's store, this host's
// memory tier (`memory_store`, empty for none; reached by others at `self_address`), the memory of
// the part's holders, the part's own host. Each is opened when asked for; those another host can
// pull from name the gcrd to ask (`pull_from`, its memory tier or its store).
struct PartSource {
  std::string where;  // for messages: "this host's store", "the memory of 10.0.0.2:7070", ...
  std::function<Result<std::unique_ptr<store::Backend>>()> open;
  std::string pull_from;  // empty: only this host reads it
  bool pull_memory = false;
};
std::vector<PartSource> part_sources(const std::string& host,
                                     const std::filesystem::path& local_store,
                                     const std::filesystem::path& memory_store,
                                     const std::string& self_address,
                                     const std::vector<std::string>& holders, const NetKey& key);

// The first of `sources` that holds checkpoint `id` (its `where`), or an error naming each tried.
Result<std::string> find_part(const std::vector<PartSource>& sources, const std::string& id);

}  // namespace gcr::gcrd
