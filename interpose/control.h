// The interposer's control thread (docs/protocol.md): created at the first cuInit, it serves the
// gcr-control mailbox and the rendezvous connections of gcr and gcrd, dispatching each request to
// the region manager's operations (control_ops.h).
#pragma once

#include "gcr/result.h"

namespace gcr::interpose {

// Creates the mailbox and starts the control thread (detached, named "gcr-control", every signal
// blocked), once: later calls return ok at once. Thread-safe. Fails with the reason (a memfd or
// thread could not be created; Errc::unsupported in a forked child, which gcr does not manage);
// a later call tries again.
Status start_control_thread();

// pthread_atfork hooks, in the interposer's own handlers:
//   prepare: control_prepare_fork() (before taking the interposer's locks)
//   parent:  control_after_fork_parent() (after releasing them)
//   child:   control_after_fork_child()
// prepare/parent keep the control thread from opening or closing a connection across the fork, so
// the child inherits none; they are optional (without them that one window stays open).
void control_prepare_fork() noexcept;
void control_after_fork_parent() noexcept;
// In a forked child: closes the inherited mailbox, its mapping and any open control connection,
// so the child is not mistaken for a managed process, and keeps start_control_thread() from
// starting one.
void control_after_fork_child() noexcept;

}  // namespace gcr::interpose
