// The launcher: fork+execs one process per rank (this binary, with the launcher's arguments plus
// --rank R --job <launcher pid>) and waits for them. It makes no CUDA call.
#pragma once

namespace mp {

// Returns the exit status for the launcher: 0 when every rank exited 0; otherwise the first
// failing rank's status (128 + signal for a signal), after killing the ranks still running,
// which would otherwise spin forever waiting for the one that died.
int launch_ranks(int ranks, int argc, char** argv);

}  // namespace mp
