// The interposer's control thread (docs/protocol.md): created at the first cuInit, it serves the
// gcr-control mailbox and the rendezvous connections of gcr and gcrd.
#pragma once

#include "gcr/result.h"

namespace gcr::interpose {

// Creates the mailbox and starts the control thread (once).
Status start_control_thread();
// In a forked child: closes the inherited mailbox, so the child is not mistaken for a managed
// process.
void control_after_fork_child();

}  // namespace gcr::interpose
