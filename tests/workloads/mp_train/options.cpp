#include "options.h"

#include "tcp_socket.h"
#include "trainer.h"
#include "workload_util.h"

namespace mp {

namespace {
constexpr char kUsage[] =
    "usage: mp_train [--ranks N] [--steps N] [--batch B] [--hidden H] [--seed S]\n"
    "                [--step-delay-ms M] [--delay-while FILE] [--hold-while FILE] [--quiet]\n"
    "                [--lag-rank R --lag-ms M] [--spread]\n"
    "                [--memop-barrier [--barrier-gap-ms M]]\n"
    "                [--transport rotate|scm|pidfd|proxy|ipc|tcp] [--ballast-mib M]\n"
    "                [--step-log FILE] [--state FILE]\n"
    "       mp_train --transport tcp --ranks N --rank R --store HOST:PORT [--listen ADDR]\n"
    "                [--store-every K] [--connect-timeout-s S] [flags above]\n"
    "  --ranks N          processes training data-parallel, 1..4, with tcp 1..12 (default 2);\n"
    "                     1 is the single-process reference\n"
    "  --steps N          training steps (default 100)\n"
    "  --batch B          global samples per step, at least 12 (default 48)\n"
    "  --hidden H         width of the two hidden layers (default 64)\n"
    "  --seed S           seed of data and initial weights (default 1)\n"
    "  --step-delay-ms M  sleep M ms after every step (default 0)\n"
    "  --delay-while FILE  sleep only while FILE exists (a test that needs the run slow while it\n"
    "                     checkpoints removes it once done)\n"
    "  --hold-while FILE  the last step waits while FILE exists (a test that must still find the\n"
    "                     run alive, however slow the machine, removes it when done)\n"
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
    "                     every link); tcp: no shared memory, a ring of TCP connections\n"
    "  --ballast-mib M    M MiB of device memory per rank, filled once, a slice rewritten every\n"
    "                     step; prints 'rank R ballast HEX' at the end (default 0)\n"
    "  --step-log FILE    append 'step S T_ms' (the step's wall time, without --step-delay-ms)\n"
    "  --state FILE       a framework's checkpoint: on SIGUSR1 the ranks agree (tcp: at the next\n"
    "                     store barrier) to write FILE.rR at one step and exit 75; started with\n"
    "                     FILE.rR there, a rank reads it and goes on from the next step\n"
    "tcp (one rank per process, started apart as on several hosts):\n"
    "  --rank R           this process's rank (without it, a launcher starts all N on loopback)\n"
    "  --store HOST:PORT  the rendezvous store; rank 0 serves it there, the others connect\n"
    "  --listen ADDR      the IP this rank listens on and connects from (default: listens on\n"
    "                     the address of its store connection's local end)\n"
    "  --store-every K    a barrier through the store after every K-th step (default 10; 0: none)\n"
    "  --connect-timeout-s S  how long to retry the store and the peers (default 60)\n"
    "internal: --rank R --job ID (set by the launcher for each rank)";
}  // namespace

Options parse_options(int argc, char** argv) {
  wl::Flags flags(argc, argv, kUsage);
  Options o;
  o.ranks = static_cast<int>(flags.integer("--ranks", o.ranks, 1, kMicroBatches));
  o.rank = static_cast<int>(flags.integer("--rank", -1, 0, kMicroBatches - 1));
  o.job = flags.text("--job", "");
  o.steps = static_cast<int>(flags.integer("--steps", o.steps, 1, 10'000'000));
  o.batch = static_cast<int>(flags.integer("--batch", o.batch, kMicroBatches, 1 << 16));
  o.hidden = static_cast<int>(flags.integer("--hidden", o.hidden, 1, 1 << 12));
  o.seed = static_cast<std::uint64_t>(flags.integer("--seed", 1, 0, INT64_MAX));
  o.step_delay_ms = static_cast<int>(flags.integer("--step-delay-ms", 0, 0, 3'600'000));
  o.delay_while = flags.text("--delay-while", "");
  o.hold_while = flags.text("--hold-while", "");
  o.quiet = flags.boolean("--quiet");
  o.spread = flags.boolean("--spread");
  o.lag_rank = static_cast<int>(flags.integer("--lag-rank", -1, 0, kMicroBatches - 1));
  o.lag_ms = static_cast<int>(flags.integer("--lag-ms", 0, 0, 60'000));
  o.memop_barrier = flags.boolean("--memop-barrier");
  o.barrier_gap_ms = static_cast<int>(flags.integer("--barrier-gap-ms", 0, 0, 60'000));
  std::string transport = flags.text("--transport", "rotate");
  o.store = flags.text("--store", "");
  o.listen = flags.text("--listen", "");
  o.store_every = static_cast<int>(flags.integer("--store-every", o.store_every, 0, 1 << 30));
  o.connect_timeout_s =
      static_cast<int>(flags.integer("--connect-timeout-s", o.connect_timeout_s, 1, 86'400));
  o.ballast_mib = static_cast<std::uint64_t>(flags.integer("--ballast-mib", 0, 0, 1 << 20));
  o.step_log = flags.text("--step-log", "");
  o.state = flags.text("--state", "");
  flags.finish();
  if (!parse_transport_choice(transport, &o.transport)) {
    flags.error("--transport wants rotate, scm, pidfd, proxy, ipc or tcp, got '" + transport + "'");
  }
  const bool tcp = is_tcp(o);
  if (o.ranks > 4 && !tcp) flags.error("more than 4 ranks need --transport tcp");
  if (o.rank >= o.ranks) flags.error("--rank must be below --ranks");
  if (o.rank >= 0 && !tcp && o.job.empty()) flags.error("--rank needs --job");
  if (o.rank >= 0 && tcp && o.store.empty())
    flags.error("--rank with --transport tcp needs --store HOST:PORT");
  HostPort unused;
  if (!o.store.empty() && !parse_host_port(o.store, &unused))
    flags.error("--store wants HOST:PORT, got '" + o.store + "'");
  if (!tcp && (!o.store.empty() || !o.listen.empty()))
    flags.error("--store and --listen need --transport tcp");
  if (tcp && o.memop_barrier)
    flags.error(
        "--memop-barrier needs memory shared between the ranks, "
        "which --transport tcp does not have");
  if (o.lag_rank >= o.ranks) flags.error("--lag-rank must be below --ranks");
  if (o.barrier_gap_ms && !o.memop_barrier) flags.error("--barrier-gap-ms needs --memop-barrier");
  if (!o.state.empty() && o.ranks > 1 && (!tcp || o.rank < 0 || o.store_every == 0))
    flags.error("--state with several ranks needs --transport tcp, --rank and store barriers");
  return o;
}

}  // namespace mp
