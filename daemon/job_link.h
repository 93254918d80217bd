// The points where a job's part on one host waits for the other hosts (Note [A job across hosts]).
//
// Note [A job across hosts]
// `gcr checkpoint --job PID@HOST:PORT ...` is one transaction with a part on every host: the gcrd
// where the command runs (the coordinator) runs its own part and asks each other host's gcrd, over
// gcrd-net with the caller's key, for its part (verb job_part, docs/protocol.md §15). Each part is
// the checkpoint of its host's trees as one host does it (checkpoint_txn.h), and meets the others
// at five points, where the coordinator gathers a line from every part, decides, and answers:
//   tcp       each part's TCP connections whose far end is not on its host -> those whose far end
//             another part holds (carried, Note [TCP within a job]); the rest are refused
//   cut       each part's largest count of communication launches -> the job's target, the same
//             on every host (Note [A consistent cut]: the ranks of every host run on to it)
//   quiesced  every part's streams drained: no host freezes a rank whose peer on another host
//             still waits for its proxy thread to relay something
//   dumped    every part's trees dumped with their connections locked: only then does any host
//             unlock (both ends were locked when either was dumped, so no byte crossed between
//             two dumps). A part that stops its job, or holds several trees, keeps them stopped
//             until then; a live part of one tree is let go by CRIU as soon as its own dump is done
//             (host memory written after, --cow-dump), still parked: its ranks wait at the closed
//             gate for their memory, and send nothing the lock would drop.
//   prepared  every part stored and its manifest committed without a name (a part nobody lists);
//             the coordinator then commits its own, naming the parts in META job_parts: that is
//             the commit point. It tells each part to commit (tag it with the job's name, end its
//             trees without -R) or, had anything failed before, to abort (remove it, let its
//             processes run on with their memory).
// Any part failing, any host's gcrd dying, or a link cut (the coordinator waits for each line
// until the transaction's limit) before the commit point aborts every part: the undos of each
// host's transaction run, and no checkpoint is listed anywhere. A part that loses the coordinator
// after it prepared keeps its unnamed manifest (it cannot know whether the job committed): a
// restore of the committed job finds it by id; otherwise gc removes it (docs/jobs.md).
// A restore of a job (META job_parts) restores each part on its host the same way, meeting once:
//   restored  every part's trees restored by CRIU with their connections locked: only then are
//             they unlocked, so that no end sends (and is reset) before its peer exists.
#pragma once

#include <cstdint>
#include <vector>

#include "gcr/result.h"
#include "job_tcp.h"

namespace gcr::gcrd {

class JobLink {
 public:
  virtual ~JobLink() = default;
  // This host's connections whose far end is not here -> those the job carries.
  virtual Result<std::vector<TcpConnection>> carried(const std::vector<TcpConnection>& outward) = 0;
  // This host's largest count of admitted communication launches (0: none) -> the job's target.
  virtual Result<std::uint64_t> cut_target(std::uint64_t admitted) = 0;
  virtual Status quiesced() = 0;
  virtual Status dumped() = 0;
  virtual Status restored() = 0;
};

}  // namespace gcr::gcrd
