#include "options.h"

#include "workload_util.h"

namespace mlp {

namespace {
constexpr char kUsage[] =
    "usage: mlp_train [--steps N] [--batch B] [--hidden H] [--layers L] [--streams K]\n"
    "                 [--seed S] [--footprint BYTES] [--host-footprint BYTES] [--host-writes N] "
    "[--pinned-footprint BYTES] [--step-delay-ms M] [--delay-while FILE] "
    "[--hold-while FILE] [--quiet] [--vmm]\n"
    "                 [--vmm-share]\n"
    "  --steps N          training steps (default 200)\n"
    "  --batch B          samples per step (default 64)\n"
    "  --hidden H         width of the hidden layers (default 128)\n"
    "  --layers L         linear layers, input 64 -> H ... -> output 16 (default 3)\n"
    "  --streams K        CUDA streams: compute, H2D prefetch, Adam updates (default 3)\n"
    "  --seed S           seed of data, initial weights and ballast (default 1)\n"
    "  --footprint BYTES  extra device ballast, e.g. 256M or 4G, read every step (default 0)\n"
    "  --host-footprint BYTES  pageable host memory, e.g. 1G, distinct in every page; each step\n"
    "                     rewrites one page of it; its hash is printed as host_checksum\n"
    "  --host-writes N    pages of the host memory each step rewrites, each from its old bytes\n"
    "                     (default 1): a checkpoint that let later writes into its image shows\n"
    "                     in host_checksum\n"
    "  --pinned-footprint BYTES  pinned host memory (cuMemHostAlloc), distinct in every page;\n"
    "                     each step a copy from the device rewrites one page of it and the CPU\n"
    "                     another, and a kernel one page of a 64 KiB mapped buffer through its\n"
    "                     device pointer; their hash is printed as pinned_checksum\n"
    "  --step-delay-ms M  sleep M ms after every step (default 0)\n"
    "  --delay-while FILE  sleep only while FILE exists (a test that needs the run slow while it\n"
    "                     checkpoints it, and no longer after, removes FILE; restored runs too)\n"
    "  --hold-while FILE  the last step waits while FILE exists (a test that must still find the\n"
    "                     run alive, however slow the machine, removes FILE when done with it)\n"
    "  --quiet            print every 50th step only\n"
    "  --vmm              keep parameters and Adam state in an expandable segment: 2 MiB pages of\n"
    "                     cuMemCreate memory whose handles are held, as PyTorch's allocator does\n"
    "  --vmm-share        --vmm, and its first page exported as a POSIX fd that stays open, as\n"
    "                     torch's share() does for another process to import";
}  // namespace

Options parse_options(int argc, char** argv) {
  wl::Flags flags(argc, argv, kUsage);
  Options o;
  o.steps = static_cast<int>(flags.integer("--steps", o.steps, 1, 10'000'000));
  o.batch = static_cast<int>(flags.integer("--batch", o.batch, 1, 1 << 20));
  o.hidden = static_cast<int>(flags.integer("--hidden", o.hidden, 1, 1 << 14));
  o.layers = static_cast<int>(flags.integer("--layers", o.layers, 1, 64));
  o.streams = static_cast<int>(flags.integer("--streams", o.streams, 1, 64));
  o.seed = static_cast<std::uint64_t>(flags.integer("--seed", 1, 0, INT64_MAX));
  o.footprint = flags.bytes("--footprint", o.footprint);
  o.host_footprint = flags.bytes("--host-footprint", o.host_footprint);
  o.host_writes = static_cast<std::uint64_t>(flags.integer("--host-writes", 1, 1, INT64_MAX));
  o.pinned_footprint = flags.bytes("--pinned-footprint", o.pinned_footprint);
  o.step_delay_ms = static_cast<int>(flags.integer("--step-delay-ms", 0, 0, 3'600'000));
  o.delay_while = flags.text("--delay-while", "");
  o.hold_while = flags.text("--hold-while", "");
  o.quiet = flags.boolean("--quiet");
  o.vmm = flags.boolean("--vmm");
  o.vmm_share = flags.boolean("--vmm-share");
  o.vmm = o.vmm || o.vmm_share;
  flags.finish();
  return o;
}

}  // namespace mlp
