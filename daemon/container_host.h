// Note [Containers restored for a network peer]
// `gcr migrate --container` ends on the destination with a `runc restore`, which gcrd runs there
// for the source's gcr (a gcrd-net request, restore_container). It is a trust boundary: the peer
// holds the token, so it may already write this gcrd's store and have it restore processes as root
// (Note [Network trust] in net_store.h); what it gains here is a container runtime run as root. So
// the operator of this host chooses what may run: gcrd serves the request only when started with
// `--containers DIR`, and restores container NAME only from the bundle DIR/NAME, which the
// operator prepared (config.json and root file system, as for `runc run`); the peer names the
// container (runc's name rules), never a path. The images it sends (CRIU's, ~1 MiB: device memory
// is parked and travels through the store) are written into a fresh private work directory, its
// gcr-checkpoint reference rewritten to name the checkpoint in this gcrd's served store, and
// removed once the runtime is done with them. The checkpoint stays in the store. A podman
// container comes as podman's archive, which carries its configuration; what the operator allows
// of that is Note [podman archives restored for a network peer] in podman_import.h.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "gcr/criu.h"
#include "gcr/result.h"
#include "gcr/store.h"
#include "gcrd_protocol.h"

namespace gcr::gcrd {

struct ContainerHost {
  std::filesystem::path bundles;  // --containers DIR; empty: no container restores
  std::string runtime;            // --runtime (default runc)
  std::filesystem::path socket;   // this gcrd's socket, for the plugin in the runtime's CRIU
};

// The restore_container request: reads the images from `client_fd` (images_archive.h), then
// restores container f["name"] from checkpoint f["id"] of `st` (the served store, at f["store"]),
// if its processes are of `peer_uids` (Note [Who a peer may run] in gcr/criu_creds.h).
// Replies pid=, container=, images_bytes=, time.receive_ns=, time.restore_ns=.
using Progress = std::function<void(const std::string&)>;
Result<std::map<std::string, std::string>> restore_container_here(
    const ContainerHost& host, const std::set<uid_t>& peer_uids, const criu::Tools& tools,
    store::Store& st, const std::map<std::string, std::string>& f, int client_fd,
    const Progress& progress);

}  // namespace gcr::gcrd
