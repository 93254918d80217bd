#include "options.h"

#include "trainer.h"
#include "workload_util.h"

namespace mp {

namespace {
constexpr char kUsage[] =
    "usage: mp_train [--ranks N] [--steps N] [--batch B] [--hidden H] [--seed S]\n"
    "                [--step-delay-ms M] [--quiet] [--lag-rank R --lag-ms M] [--spread]\n"
    "                [--memop-barrier [--barrier-gap-ms M]]\n"
    "                [--transport rotate|scm|pidfd|proxy|ipc]\n"
    "  --ranks N          processes training data-parallel, 1..4 (default 2); 1 is the\n"
    "                     single-process reference\n"
    "  --steps N          training steps (default 100)\n"
    "  --batch B          global samples per step, at least 12 (default 48)\n"
    "  --hidden H         width of the two hidden layers (default 64)\n"
    "  --seed S           seed of data and initial weights (default 1)\n"
    "  --step-delay-ms M  sleep M ms after every step (default 0)\n"
    "  --quiet            print every 50th step only\n"
    "  --spread           rank R runs on GPU R % (the number of GPUs) instead of GPU 0\n"
    "  --lag-rank R       rank R sleeps --lag-ms before launching its all-reduce on every\n"
    "  --lag-ms M         step s with s % 4 == 1, while its peers' kernels already spin\n"
    "  --memop-barrier    before each all-reduce, a ring barrier of stream memory operations\n"
    "                     (cuStreamWriteValue64 to the next rank's flag, cuStreamWaitValue64 on\n"
    "                     this rank's); --lag-rank then lags before its barrier write, while\n"
    "                     its peers' streams wait on it\n"
    "  --barrier-gap-ms M every rank sleeps M ms between its barrier and its all-reduce on the\n"
    "                     steps --lag-rank lags: its stream waits on the laggard's write with\n"
    "                     no kernel of its own issued after it\n"
    "  --transport T      how mailbox parts reach the peer (default rotate: every transport on\n"
    "                     every link)\n"
    "internal: --rank R --job ID (set by the launcher for each rank)";
}  // namespace

Options parse_options(int argc, char** argv) {
  wl::Flags flags(argc, argv, kUsage);
  Options o;
  o.ranks = static_cast<int>(flags.integer("--ranks", o.ranks, 1, 4));
  o.rank = static_cast<int>(flags.integer("--rank", -1, 0, 3));
  o.job = flags.text("--job", "");
  o.steps = static_cast<int>(flags.integer("--steps", o.steps, 1, 10'000'000));
  o.batch = static_cast<int>(flags.integer("--batch", o.batch, kMicroBatches, 1 << 16));
  o.hidden = static_cast<int>(flags.integer("--hidden", o.hidden, 1, 1 << 12));
  o.seed = static_cast<std::uint64_t>(flags.integer("--seed", 1, 0, INT64_MAX));
  o.step_delay_ms = static_cast<int>(flags.integer("--step-delay-ms", 0, 0, 3'600'000));
  o.quiet = flags.boolean("--quiet");
  o.spread = flags.boolean("--spread");
  o.lag_rank = static_cast<int>(flags.integer("--lag-rank", -1, 0, 3));
  o.lag_ms = static_cast<int>(flags.integer("--lag-ms", 0, 0, 60'000));
  o.memop_barrier = flags.boolean("--memop-barrier");
  o.barrier_gap_ms = static_cast<int>(flags.integer("--barrier-gap-ms", 0, 0, 60'000));
  std::string transport = flags.text("--transport", "rotate");
  flags.finish();
  if (!parse_transport_choice(transport, &o.transport)) {
    flags.error("--transport wants rotate, scm, pidfd, proxy or ipc, got '" + transport + "'");
  }
  if (o.rank >= o.ranks) flags.error("--rank must be below --ranks");
  if (o.rank >= 0 && o.job.empty()) flags.error("--rank needs --job");
  if (o.lag_rank >= o.ranks) flags.error("--lag-rank must be below --ranks");
  if (o.barrier_gap_ms && !o.memop_barrier) flags.error("--barrier-gap-ms needs --memop-barrier");
  return o;
}

}  // namespace mp
