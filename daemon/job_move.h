// One rank of a job across hosts moved to another host while the rest of the job runs (`gcr
// migrate PID --job PID@HOST:PORT ...`): the moving rank's checkpoints, and the other hosts' part
// in them.
//
// Note [A rank moved while its job runs]
// The rank moves as one process does (Note [Migration] in cli/cmd_migrate.cpp): pre-copy rounds,
// each a live checkpoint of the rank pushed to the destination and staged there, then a stop in
// which the rank is dumped, its last changes pushed, and the destination restores it. Its gcrd
// coordinates each of these checkpoints as a job across hosts (Note [A job across hosts] in
// job_link.h) whose other hosts are bystanders: each one's gcrd takes part in the meetings (tcp,
// cut, quiesced, dumped) for its ranks, but dumps and stores nothing.
// - Every round and the stop cut the whole job: a rank cannot be drained while a peer's stream
//   waits on a launch the rank has not issued, so the bystanders' ranks run on to the job's
//   target and drain too. In a round they go on as soon as the rank is dumped: its stall is a
//   live checkpoint's, the job's the same.
// - In the stop the bystanders' ranks are held still from the quiesce until the rank runs at the
//   destination (the job-wide stop). Once every rank is drained, each bystander holds every
//   thread of its ranks (tree_freeze.h: ptrace, which no parent sees and gcrd's death undoes) and
//   lets their sockets settle (Note [A lock that drops nothing]); one more meeting, "frozen",
//   makes the rank's host lock its connections only then. A peer that sent to the rank while it
//   moved would have its bytes dropped and sent again only when its retransmission timer fired
//   (200 ms at least, doubling): held still, it sends nothing.
// - The rank's connections to the bystanders are carried: its ends dumped with TCP repair, theirs
//   left in their kernels as they are. The peers keep sending to the rank's address, so the rank
//   takes it along: it must have one of its own (a /32 on its host, used by every connection the
//   job carries), checked in the first meeting before anything stops. Its gcrd removes the address
//   once the rank is dumped and held, before the client hears so (and so before it can ask the
//   destination); the destination adds it under its restore's lock (Note [Addresses that move
//   with a rank]) and gives it up should its restore fail; a migration that lets the rank run on
//   here puts it back first. Once the destination has said the rank runs there, the rest of the
//   job goes on with it: should that restore fail after all, the copy here is ended, not resumed
//   (it is behind its peers), and the checkpoint restores the rank.
// - The stop is the rank's dump, its last changes pushed and its restore at the destination
//   (on demand, staged by the rounds): the rounds moved its footprint, so the stop does not grow
//   with it.
// - Failures: every bystander lets its ranks go on when told (the stop over, or aborted), when
//   its coordinator says nothing for the job's host limit, or when the connection ends (gcrd
//   gone, a link cut). Whatever became of the rank (Note [Migration] keeps exactly one copy of
//   it, here or at the destination), the rest of the job runs on.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "job_serve.h"

namespace gcr::gcrd {

// The moving rank's checkpoint (req: its root; leave_running for a round, hold for the stop),
// the other hosts' ranks as bystanders. The report's times add "job_stall" (a round: the
// longest any rank was stalled) or "job_stop" (the stop: the longest a bystander was held).
Result<CheckpointReport> checkpoint_moving_rank(store::Store& store, const criu::Tools& tools,
                                                CheckpointRequest req,
                                                const std::vector<JobHost>& hosts,
                                                const JobOptions& job, const Progress& progress,
                                                WorkRegistry* work);

// A bystander's part, for the moving rank's gcrd at the other end of `fd`.
struct BystanderRequest {
  std::vector<pid_t> roots;
  std::chrono::milliseconds timeout{10'000};  // to reach the cut and drain
  std::chrono::milliseconds idle{30'000};     // the coordinator's silence taken for its loss
  bool freeze = false;  // the stop: held still until told; else a round, on once the rank is dumped
};
struct BystanderReport {
  std::uint64_t stall_ns = 0;  // from the cut until its ranks went on
  std::uint64_t processes = 0, threads = 0;
};
Result<BystanderReport> bystand(const BystanderRequest& req, int fd, const Progress& progress);

}  // namespace gcr::gcrd
