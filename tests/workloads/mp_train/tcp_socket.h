// TCP sockets for --transport tcp: "HOST:PORT" addresses (IPv4, IPv6 in brackets, or a name),
// listening, connecting with retries until a deadline, accepting with a timeout, and whole-buffer
// sends and receives. Calls that can fail in a way the caller reports return false or an empty fd
// and leave the reason in *error (or errno).
#pragma once

#include <cstddef>
#include <string>

#include "unique_fd.h"

namespace mp {

struct HostPort {
  std::string host;
  int port = 0;
  std::string text() const;  // "host:port", "[v6]:port"
};

// Splits "HOST:PORT" at its last colon (brackets around an IPv6 host are dropped).
bool parse_host_port(const std::string& text, HostPort* out);

// A listening socket on host:port (port 0: the kernel picks one), SO_REUSEADDR set.
UniqueFd tcp_listen(const HostPort& at, int backlog, std::string* error);
// The address a socket is bound to (a listener's port, a connection's local end).
HostPort tcp_local_address(const UniqueFd& socket);
// A port nobody listens on now (bound on 127.0.0.1 and released): for the launcher's store.
int tcp_free_port();

// Connects to `to`, retrying while nobody listens there yet (or the network says unreachable)
// until timeout_ms has passed, from the IP `from` when it is not empty (a rank's own address,
// which moves with it: docs/jobs.md). TCP_NODELAY is set on the connection.
UniqueFd tcp_connect(const HostPort& to, int timeout_ms, std::string* error,
                     const std::string& from = {});
// The next connection on `listener`; an empty fd (errno ETIMEDOUT) if none came in timeout_ms.
UniqueFd tcp_accept(const UniqueFd& listener, int timeout_ms);

// Sends all of data (send(2) flags: MSG_NOSIGNAL is added); false (errno set) on an error.
bool send_all(int fd, const void* data, std::size_t size, int flags = 0);
// Receives exactly size bytes; false on an error (errno set) or an end of stream (errno 0) first.
bool recv_all(int fd, void* data, std::size_t size);
// Waits until fd is readable; false (errno ETIMEDOUT) after timeout_ms (negative: no limit).
bool wait_readable(int fd, int timeout_ms);

}  // namespace mp
