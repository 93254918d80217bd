// The launcher: fork+execs one process per rank (this binary, with the launcher's arguments plus
// --rank R --job <launcher pid>, and with --transport tcp --store 127.0.0.1:<a free port> unless
// --store was given) and waits for them. It makes no CUDA call.
#pragma once

#include "options.h"

namespace mp {

// Returns the exit status for the launcher: 0 when every rank exited 0; otherwise the first
// failing rank's status (128 + signal for a signal), after killing the ranks still running,
// which would otherwise spin forever waiting for the one that died.
int launch_ranks(const Options& options, int argc, char** argv);

}  // namespace mp
