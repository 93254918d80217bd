// `gcr slurm batch -- SCRIPT...`: the supervisor of a `--gcr` batch job, exec'd by gcr's SPANK
// plugin in place of the batch script's process (Note [gcr under Slurm] in spank_gcr.cpp).
//
// Note [The job's supervisor]
// - It runs the script as its child, in the same process group, with GCR_SLURM_SUPERVISOR and
//   GCR_SLURM_KEY in its environment and the checkpoint signal ignored (whether Slurm signals the
//   batch shell alone or its process group, the script neither dies of it nor sees it twice). It
//   ends with the script's exit code.
// - Each task of a `--gcr` step registers (Note [A task and its supervisor] in
//   supervisor_wire.h): its rank, its pid and its node's gcrd. The newest step whose every task
//   registered is the job's.
// - At the signal (`sbatch --signal=B:USR1@SECONDS`, sent before the time limit and, with
//   preempt_send_user_signal, at preemption) it checkpoints the step live as one job across its
//   nodes (`gcr checkpoint --job`, this node's gcrd coordinating, every part copied into its
//   store), pushes it to the store every node reaches (plugstack.conf store=, a bucket) as
//   slurm-JOBID, and requeues the job itself (`scontrol requeue`: a preempted job that ended on
//   its own would not be requeued, and the preemptor starts at once rather than after the grace
//   time). With `--gcr=every=DURATION` it checkpoints and pushes each period too (a node lost
//   then costs at most a period). A checkpoint that fails is said so; the store keeps the last
//   one that succeeded.
// - Requeued (SLURM_RESTART_COUNT > 0), it pulls slurm-JOBID from the store before the script
//   starts. When every task of the checkpointed step (the same step id) has registered, on
//   whatever nodes the job got, it restores the job with this node's gcrd coordinating: node i's
//   part of the checkpoint goes to the node that is node i now (`gcr restore --place`), and each
//   task is told its rank's pid (CRIU restores the original pids). Without a checkpoint, or when
//   the restore fails, the tasks start the program from the beginning, and it says which.
// - The checkpoint's labels say what the restore needs: slurm.step, slurm.tasks (RANK:PID:NODE,
//   ...) and slurm.nodes (each node's gcrd, in node order).
#pragma once

#include <string>
#include <vector>

#include "gcr/result.h"

namespace gcr::slurm {

struct SupervisorOptions {
  std::vector<std::string> script;
  long long every_ms = 0;  // --gcr=every=: 0 none
};

// The script's exit code (128 + N when a signal N ended it).
Result<int> run_supervisor(const SupervisorOptions& options);

}  // namespace gcr::slurm
