// A keeper for a parked process's memory, should gcrd die (Note [Parked memory outlives gcrd]).
//
// Note [Parked memory outlives gcrd]
// Between park and unpark, gcrd holds the only references to a process's device memory (the
// process must not: CRIU would dump it). If gcrd died then — killed, crashed, OOM — the memory
// would go with it and the process would wait forever in its next CUDA call. So for that span
// gcrd starts `gcr-keeper`, a small process that holds duplicates of the parked fds and watches
// gcrd through a pipe. gcrd says "done" once the process has its memory back (or is gone); if the
// pipe closes without it, gcrd is dead and the keeper gives the memory back itself: it waits
// until the process answers its control channel again (a CRIU dump that outlived gcrd finishes
// first), unparks it and lets it run.
//
// A restore needs the same guard with the opposite remedy: from CRIU's restore to the moment
// the process holds its memory (or the load table that makes it wait for it), the restored
// process is parked and only gcrd can give it memory it does not have. If gcrd dies then, the
// keeper (started with start_restore) ends the process rather than leave it parked forever; once
// the process has the table, the interposer guards itself (op_cow_end ends a process whose loads
// are pending when gcrd goes away). The keeper knows the process by pid and start time: a pid
// reused by another process is left alone.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string_view>
#include <vector>

#include "gcr/control.h"
#include "gcr/result.h"
#include "gcr/unique_fd.h"

namespace gcr::gcrd {

class Keeper {
 public:
  // Starts gcr-keeper (next to gcrd's binary) with duplicates of the parked fds.
  // `stopped_roots`: other trees a dump may leave stopped with it (Note [A job of several trees]
  // in job.h), which it continues too should gcrd die.
  static Result<Keeper> start(pid_t pid, const std::vector<control::ParkedRegion>& parked,
                              const std::vector<pid_t>& stopped_roots = {});
  // For a restore, started before CRIU runs: once restored(pid) names the process, it is ended if
  // gcrd dies before done(); should gcrd die before that, while CRIU restores, the keeper learns
  // the pid from `pidfile` (CRIU's --pidfile; empty: no such file, nothing it can do).
  // host_pages_fd (optional): gcrd's end of the socket on which it serves the restored tasks'
  // host memory (Note [Host memory from the store] in host_pages.h). The keeper holds a
  // duplicate, so that gcrd's death does not hang up on CRIU's daemon, and should gcrd die before
  // done() it ends the restored tree at once (not only a parked process), then lets go of it.
  static Result<Keeper> start_restore(const std::filesystem::path& pidfile, int host_pages_fd = -1);
  // A restore into a new PID namespace has no pidfile: should gcrd die while CRIU restores, the
  // keeper finds the restored task under `unshare_pid` once `ready_file` names it.
  Status restoring_in_namespace(pid_t unshare_pid, const std::filesystem::path& ready_file);
  Status restored(pid_t pid);
  // With host_pages_fd: the restore runs in `pid` (criu, or unshare): should gcrd die before
  // restored(), the keeper ends it with the tasks it is restoring (they have not run the program
  // yet, and would wait for host memory no one serves).
  Status restoring_in(pid_t pid);
  Keeper() = default;
  Keeper(Keeper&&) noexcept = default;
  Keeper& operator=(Keeper&&) noexcept = default;
  // Without done(): the keeper makes sure the process is not left parked (gcrd returning early
  // on an error is treated like gcrd dying; a process that has its memory is left as it is).
  ~Keeper() = default;

  // keeper.cpp's: the write end of a started keeper's pipe.
  static Keeper from_pipe(UniqueFd pipe) {
    Keeper k;
    k.pipe_ = std::move(pipe);
    return k;
  }

  // The process has its memory back, or is gone: the keeper lets go and exits.
  void done() noexcept;
  // The stopped process is committed to a migration's destination: should gcrd die now, the
  // keeper ends it instead of giving it its memory back (Note [Migration] in cli/cmd_migrate.cpp).
  void handed_over() noexcept;
  // The destination refused it after all: should gcrd die now, give it its memory back again.
  void kept() noexcept;
  // Lines the keeper acts on should gcrd die (Note [TCP within a job] in job_tcp.h):
  // "tcp_lock NETNS_PID CHAIN", "tcp_end PID FD", "tcp_unlocked".
  void say(std::string_view lines) noexcept;

 private:
  UniqueFd pipe_;  // write end; the keeper reads it
};

}  // namespace gcr::gcrd
