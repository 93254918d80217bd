// One conversation between a process's agent thread and one authenticated caller
// (docs/protocol.md §5-§6): hello, then requests dispatched to a Handler until bye or until the
// caller goes away. The mailbox and the credential check come before (server.cpp); this file owns
// the request rules.
//
// Note [Nobody left behind]
// gcr can die mid-checkpoint, and the application must not stay frozen or lose its data because of
// it. So a session never ends with the process quiesced: however it ends (bye, end of file, a
// broken connection), the server resumes a quiesced process -- parked is the one state that
// outlives a session, and it is meant to (CRIU dumps a parked process). And a park only counts once
// the caller confirms with park_done that it holds every fd: until then the server keeps its own
// copies, and maps the regions back (unpark) if the confirmation does not come.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "channel.h"
#include "gcr/control.h"

namespace gcr::control {

struct SessionOptions {
  std::string software;
  void (*log)(std::string_view message) = nullptr;
  std::chrono::milliseconds io_timeout{30'000};
  std::uint32_t server_pid = 0;
  std::uint32_t server_uid = 0;
};

// Serves the caller at the other end of `channel` until it says bye or goes away, then resumes a
// quiesced process (Note [Nobody left behind]). Leaves the channel open: the caller of this
// function closes it. Does not throw except std::bad_alloc.
void serve_session(Channel& channel, Handler& handler, const SessionOptions& options);

}  // namespace gcr::control
