// Note [A job's old checkpoints]
// A `--gcr` job's supervisor keeps one checkpoint of its job: once a checkpoint is in the store
// every node reaches (the bucket's slurm-JOBID), the one before it is removed from every node
// that holds a part of it (each part's host is asked over gcrd-net, verb tier op=remove) and
// from this node (the manifest and its copies of the parts), and from the nodes of the step now
// (where a restore placed the parts of a checkpoint pulled from the bucket). When the batch script
// ends by itself, the job is done: its last checkpoint goes too, with the bucket's slurm-JOBID. A
// job that is cancelled, times out or loses its node keeps what it has (`gcr slurm forget` and `gcr
// --store BUCKET image rm slurm-JOBID` remove it by hand); `gcr image gc` frees the chunks.
#pragma once

#include <string>
#include <vector>

#include "gcr/result.h"

namespace gcr::slurm {

struct Forgotten {
  std::size_t checkpoints = 0, parts = 0;
  std::vector<std::string> warnings;  // a part whose host could not be told
};

// Removes each checkpoint `names` of this node's store, and its parts on their hosts and on
// `also` (gcrds a restore may have placed them on), with the key in `token_file`. A name not in
// the store is skipped.
Result<Forgotten> forget_checkpoints(const std::vector<std::string>& names,
                                     const std::vector<std::string>& also,
                                     const std::string& token_file);

}  // namespace gcr::slurm
