// The two ends of a checkpoint of a job across hosts (Note [A job across hosts] in job_link.h):
// the coordinator's (verb checkpoint with remote.N fields) and a part's (verb job_part).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "comma_list.h"
#include "gcr/criu.h"
#include "gcr/result.h"
#include "gcr/store.h"
#include "job_hosts.h"
#include "job_parts.h"
#include "job_tiers.h"
#include "peer_keys.h"
#include "restore.h"
#include "work_registry.h"

namespace gcr::gcrd {

// Another host's ranks: its gcrd (HOST:PORT) and their roots there.
struct JobHost {
  std::string address;
  std::vector<pid_t> pids;
};

// The coordinator: this host's part is `req` (its roots), the others are asked over gcrd-net with
// `key`; a host silent for `idle` is taken for gone. `copy_parts`: once committed, every other
// part is copied into `store` too (a copy for a restore on a replacement host, should its host
// be lost: Note [A job across hosts]).
struct JobOptions {
  NetKey key;
  std::chrono::milliseconds idle{30'000};
  bool copy_parts = false;
  // A restore: the part of the host whose gcrd was OLD restored on NEW's (OLD -> NEW).
  std::map<std::string, std::string> place;
  // Note [Checkpoints in peers' memory] (memory_tier.h): a checkpoint's copies into peers' memory;
  // at a restore, each part's holders (META peer_copies) and this gcrd's own memory tier's store.
  PeerCopyOptions peer;
  std::map<std::string, std::vector<std::string>> holders;
  std::filesystem::path memory_store;
  std::filesystem::path served_store;  // where the peers read this host's part (gcrd --store)
};
// Note [Checkpoints in peers' memory]: the ring of `--peer-copies` over this host (first) and
// `hosts`; an error when this gcrd does not listen where the others can reach it.
Result<std::map<std::string, std::vector<std::string>>> plan_peer_copies(
    const PeerCopyOptions& peer, const std::vector<JobHost>& hosts);
Result<CheckpointReport> checkpoint_across_hosts(store::Store& store, const criu::Tools& tools,
                                                 CheckpointRequest req,
                                                 const std::vector<JobHost>& hosts,
                                                 const JobOptions& job, const Progress& progress,
                                                 WorkRegistry* work);

// A part, for the coordinator at the other end of `fd` (the request's connection).
Result<CheckpointReport> checkpoint_part(store::Store& store, const criu::Tools& tools,
                                         CheckpointRequest req, int fd,
                                         std::chrono::milliseconds idle, const Progress& progress,
                                         WorkRegistry* work);

// The coordinator's restore of a job (META job_parts `parts`): this host's part is `req`, each
// other host restores its own (verb restore with job_part=1) and every host meets once its trees
// are restored. The other hosts' pids are added to the report's tree_pids' companion `remote`.
struct RemoteRestored {
  std::string address;
  std::string pids;         // its root and its other trees, comma-separated
  std::string placed_from;  // a placed part: where it was read ("this host's peer memory", ...)
};
// A part placed on another host (JobOptions::place) is copied there first, from the fastest place
// that holds it (part_sources, job_tiers.h: this store's copy from --copy-parts, a peer's memory,
// its old host), and restored with its addresses taken (Note [Addresses that move with a rank] in
// address_takeover.h).
Result<RestoreReport> restore_across_hosts(store::Store& store, const criu::Tools& tools,
                                           RestoreRequest& req, const std::vector<JobPart>& parts,
                                           const JobOptions& job, const Progress& progress,
                                           std::vector<RemoteRestored>* restored);

// Note [Checkpoints in peers' memory] (memory_tier.h): the job's coordinator (`coordinator`,
// HOST:PORT) is lost, and this host's memory tier (`memory_store`) holds its part, checkpoint `id`
// (the job's manifest). That part is placed on the coordinator's replacement (options.place), whose
// gcrd then restores the job as its coordinator (this host's part too, as any other); its reply,
// with `restored_on` (the replacement) added.
Result<std::map<std::string, std::string>> restore_for_lost_coordinator(
    const std::string& coordinator, const std::string& id,
    const std::filesystem::path& memory_store, const JobOptions& options, const Progress& progress);

// A part's restore, for the coordinator at the other end of `fd`.
Result<RestoreReport> restore_part(store::Store& store, const criu::Tools& tools,
                                   RestoreRequest& req, int fd, std::chrono::milliseconds idle,
                                   const Progress& progress);

// Sends the host whose gcrd is at `address` a request (`verb` with `fields`) without waiting:
// its part answers on the wire (RemotePart, job_hosts.h).
Result<RemotePart> ask_host(const std::string& address, const NetKey& key,
                            std::chrono::milliseconds idle, const std::string& verb,
                            const WireFields& fields);

}  // namespace gcr::gcrd
