// cmd_slurm.h: the commands are thin; slurm/ holds what they do.
#include "cmd_slurm.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "cmd_process.h"
#include "comma_list.h"
#include "forget.h"
#include "node_tools.h"
#include "slurm_env.h"
#include "supervisor.h"
#include "task.h"

namespace gcr::cli {
namespace {

struct SlurmCliOptions {
  std::vector<std::string> command;  // or the checkpoints to forget
  std::string token_file, also;
  std::string address;
  std::uint32_t job = 0, step = 0, uid = 0;
};

// The batch script's and a task's exit code is the job's: gcr's own codes would hide it.
[[noreturn]] void exit_with(int code) {
  std::fflush(stdout);
  std::exit(code);
}

Status batch(const SlurmCliOptions& o) {
  GCR_TRY_ASSIGN(slurm::SlurmEnv env, slurm::read_slurm_env(false));
  slurm::SupervisorOptions s{o.command, 0};
  if (!env.every.empty()) {
    GCR_TRY_ASSIGN(auto every, parse_period(env.every, "--gcr=every="));
    s.every_ms = every.count();
  }
  GCR_TRY_ASSIGN(int code, slurm::run_supervisor(s));
  exit_with(code);
}

Status task(const SlurmCliOptions& o) {
  GCR_TRY_ASSIGN(int code, slurm::run_task(o.command));
  exit_with(code);
}

Status reap(const SlurmCliOptions& o) {
  for (pid_t p : slurm::leftovers_of_step(o.job, o.step, static_cast<uid_t>(o.uid))) {
    std::fprintf(stderr, "gcr: ending pid %d, left by step %u.%u (a restored task's rank)\n", p,
                 o.job, o.step);
    ::kill(p, SIGKILL);
  }
  return ok();
}

Status forget(const SlurmCliOptions& o) {
  GCR_TRY_ASSIGN(slurm::Forgotten f,
                 slurm::forget_checkpoints(o.command, gcrd::split_commas(o.also), o.token_file));
  for (const std::string& w : f.warnings) std::fprintf(stderr, "gcr: warning: %s\n", w.c_str());
  print("removed " + std::to_string(f.checkpoints) + " checkpoints and " + std::to_string(f.parts) +
        " parts of them\n");
  return ok();
}

}  // namespace

void register_slurm_commands(CLI::App& app, Context& ctx) {
  static SlurmCliOptions o;
  auto* slurm = app.add_subcommand(
      "slurm", "What gcr's SPANK plugin runs in a Slurm job (srun/sbatch --gcr; docs/slurm.md)");
  slurm->require_subcommand(1);
  slurm->footer(
      "Install the plugin with one line in Slurm's plugstack.conf (docs/slurm.md):\n"
      "  optional /usr/lib/gcr/slurm/gcr_spank.so token=/etc/gcr/token store=s3://BUCKET/slurm "
      "addresses=10.0.200.0/24\n"
      "then: sbatch --gcr --signal=B:USR1@120 --requeue job.sh");
  auto* b = slurm->add_subcommand(
      "batch",
      "The supervisor of a --gcr batch job: runs the script, checkpoints the job at its "
      "--signal and requeues it, restores it when requeued");
  b->add_option("command", o.command, "The batch script and its arguments (after --)")->required();
  on_run(b, ctx, [] { return batch(o); });
  auto* t = slurm->add_subcommand(
      "task",
      "One task of a --gcr step: registers with the job's supervisor, then runs CMD "
      "under gcr (gcr run) or stands in for its restored rank");
  t->add_option("command", o.command, "The task's program and its arguments (after --)")
      ->required();
  on_run(t, ctx, [] { return task(o); });
  auto* a = slurm->add_subcommand("address", "The job's address on this node (root)");
  a->require_subcommand(1);
  auto* take = a->add_subcommand("take", "Add ADDRESS as a /32 where its subnet is, announced");
  take->add_option("address", o.address, "A.B.C.D")->required();
  on_run(take, ctx, [] { return slurm::take_job_address(o.address); });
  auto* release = a->add_subcommand("release", "Remove ADDRESS from this node");
  release->add_option("address", o.address, "A.B.C.D")->required();
  on_run(release, ctx, [] { return slurm::release_job_address(o.address); });
  auto* r = slurm->add_subcommand(
      "reap", "End what a step's restored tasks left on this node (root, after the step)");
  r->add_option("job", o.job, "SLURM_JOB_ID")->required();
  r->add_option("step", o.step, "SLURM_STEP_ID")->required();
  r->add_option("uid", o.uid, "The job's user: only its processes are ended")->required();
  on_run(r, ctx, [] { return reap(o); });
  auto* f = slurm->add_subcommand(
      "forget",
      "Remove a job's checkpoints here and their parts on every host (Note [A job's "
      "old checkpoints] in slurm/forget.h)");
  f->add_option("names", o.command, "The checkpoints (tags in this node's store)")->required();
  f->add_option("--token-file", o.token_file, "The key of the job's gcrds")->type_name("FILE");
  f->add_option("--also", o.also, "More gcrds a restore may have placed parts on")
      ->type_name("HOST:PORT,...");
  on_run(f, ctx, [] { return forget(o); });
}

}  // namespace gcr::cli
