// Unix stream sockets between the ranks: abstract names, fixed-size messages, and an fd passed
// alongside a message with SCM_RIGHTS. Failures print what failed and exit 2 (workload_util.h's
// convention): a rank cannot go on without its peers.
#pragma once

#include <cstddef>
#include <string>

#include "unique_fd.h"

namespace mp {

// A listening socket at the abstract address "\0<name>".
UniqueFd listen_abstract(const std::string& name);
UniqueFd accept_one(const UniqueFd& listener);
// Connects to "\0<name>", retrying while nobody listens there yet, for up to timeout_ms.
UniqueFd connect_abstract(const std::string& name, int timeout_ms);

// Sends `size` bytes, with `fd` attached when it is >= 0.
void send_message(const UniqueFd& socket, const void* data, std::size_t size, int fd = -1);
// Receives exactly `size` bytes; an attached fd goes to *fd (which must then be non-null).
// Returns false on end of file before the first byte.
bool receive_message(const UniqueFd& socket, void* data, std::size_t size, UniqueFd* fd = nullptr);

[[noreturn]] void fail_errno(const std::string& what);

}  // namespace mp
