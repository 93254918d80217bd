// A connected unix stream socket carrying framed control messages (docs/protocol.md §3), with fds
// attached by SCM_RIGHTS (§7), every wait bounded by a deadline. It moves bytes and fds and checks
// the frame header; what a payload means is messages.cpp's business, who may talk is
// rendezvous.cpp's.
//
// Note [Fds ride on the header]
// A message is sent with one sendmsg whose SCM_RIGHTS data the kernel attaches to the first bytes
// of the message; the reader reads messages exactly (a header, then exactly its payload), so the
// fds of message N arrive while it reads message N's header and never mix with another's. Fds are
// received close-on-exec and owned at once, so an error path cannot leak one into the process.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "gcr/result.h"
#include "gcr/unique_fd.h"
#include "messages.h"

namespace gcr::control {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
inline constexpr Deadline kNoDeadline = Deadline::max();
inline Deadline deadline_after(std::chrono::milliseconds d) {
  return d.count() < 0 ? Clock::now() : Clock::now() + d;
}
// Milliseconds left until `deadline` for poll(2): -1 for kNoDeadline, 0 once it has passed.
int poll_timeout_ms(Deadline deadline);

struct Message {
  MsgType type = MsgType::error;
  std::uint16_t minor = 0;  // the sender's protocol minor version (its header's)
  std::vector<std::uint8_t> payload;
  std::vector<UniqueFd> fds;
};

class Channel {
 public:
  Channel() = default;
  explicit Channel(UniqueFd socket) noexcept : socket_(std::move(socket)) {}

  bool is_open() const noexcept { return socket_.valid(); }
  int fd() const noexcept { return socket_.get(); }

  // Sends one message with `fds` attached (at most kMaxFdsPerMessage; they stay the caller's).
  // Errors: timeout, io_error "the peer closed the connection", invalid_argument.
  Status send(MsgType type, std::span<const std::uint8_t> payload, std::span<const int> fds,
              Deadline deadline);
  // Receives one message. More than max_fds fds fail it with Errc::protocol (the fds are closed).
  // Errors: timeout, io_error (the peer closed the connection: "connection closed by the peer"),
  // protocol, unsupported (another major version).
  Result<Message> recv(Deadline deadline, std::size_t max_fds);
  // Waits until the peer has closed its end (end of file). Data arriving first is an error.
  Status wait_closed(Deadline deadline);

  void close() noexcept { socket_.reset(); }
  UniqueFd release() noexcept { return std::move(socket_); }

 private:
  Status recv_exact(std::uint8_t* buf, std::size_t n, std::vector<UniqueFd>* fds,
                    Deadline deadline);
  Status wait_for(short events, Deadline deadline);

  UniqueFd socket_;
};

// Whether an error from Channel::recv means the peer closed the connection.
bool is_peer_closed(const Error& e);

}  // namespace gcr::control
