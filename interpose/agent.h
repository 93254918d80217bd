// The interposer's agent thread (docs/protocol.md): gcr's and gcrd's agent inside the process,
// named apart from the control protocol it speaks (libgcr's control/) and from the gcr-control
// mailbox and thread name that protocol fixes. Created at the first cuInit, it serves the
// gcr-control mailbox and the rendezvous connections of gcr and gcrd, dispatching each request to
// the region manager's operations (agent_ops.h).
#pragma once

#include "gcr/result.h"

namespace gcr::interpose {

// Creates the mailbox and starts the agent thread (detached, named "gcr-control", every signal
// blocked), once: later calls return ok at once. Thread-safe. Fails with the reason (a memfd or
// thread could not be created; Errc::unsupported in a forked child, which gcr does not manage);
// a later call tries again.
Status start_agent_thread();

// pthread_atfork hooks, in the interposer's own handlers:
//   prepare: agent_prepare_fork() (before taking the interposer's locks)
//   parent:  agent_after_fork_parent() (after releasing them)
//   child:   agent_after_fork_child()
// prepare/parent keep the agent thread from opening or closing a connection across the fork, so
// the child inherits none; they are optional (without them that one window stays open).
void agent_prepare_fork() noexcept;
void agent_after_fork_parent() noexcept;
// In a forked child: closes the inherited mailbox, its mapping and any open control connection,
// so the child is not mistaken for a managed process, and keeps start_agent_thread() from
// starting one.
void agent_after_fork_child() noexcept;

}  // namespace gcr::interpose
