// gcrd's record of which checkpoint each process's last one was (Note [gcrd owns lineage]).
//
// Note [gcrd owns lineage]
// An incremental checkpoint stores only the regions written since its parent and takes the rest
// from the parent, so the parent decides whose device memory a restore gets. The process under
// gcr is not trusted (docs/security.md): what it says its last checkpoint was (`last_checkpoint`
// in its status, set by `new_epoch`) is a claim, not a fact. gcrd keeps its own record, keyed by
// pid *and* start time (a reused pid is another process), written only once a checkpoint is
// committed (or once a restore from one has handed the process its memory). The parent of a
// checkpoint is the recorded one, and only when the process's claim names the same one: a claim
// that differs means the process's dirty bits count from another epoch (a checkpoint that failed
// after new_epoch), or a lie; either way the checkpoint is a full one. The parent must also
// belong to the process's owner. The record lives in gcrd's private work root (file `lineage`),
// so a restarted gcrd keeps it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace gcr::gcrd {

// The start time of pid (field 22 of /proc/PID/stat, clock ticks since boot); nullopt if gone.
std::optional<std::uint64_t> process_start_time(pid_t pid);

struct ProcessKey {
  pid_t pid = 0;
  std::uint64_t start_time = 0;
};
// pid with its start time now; nullopt if it is gone.
std::optional<ProcessKey> process_key(pid_t pid);

// True while pid is the process `key` named (same start time) and not a zombie.
bool same_process(const ProcessKey& key);

// The id (hex) of the last checkpoint gcrd committed of this process, or restored it from.
std::optional<std::string> lineage_last(const ProcessKey& key);
// Records it; call after the commit. Best effort: a record that cannot be saved only makes the
// next checkpoint a full one.
void lineage_record(const ProcessKey& key, const std::string& checkpoint_id);

}  // namespace gcr::gcrd
