// Framed messages and SCM_RIGHTS over a connected unix stream socket (Note [Fds ride on the
// header] in channel.h). The socket may be blocking or not: every call uses MSG_DONTWAIT and waits
// in poll(2) up to its deadline, and never raises SIGPIPE (MSG_NOSIGNAL): this code runs inside
// the user's program.
#include "channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace gcr::control {
namespace {

constexpr char kPeerClosed[] = "connection closed by the peer";
constexpr std::size_t kScmMaxFd = 253;  // the kernel's limit per message; we receive up to it

Error transport_error(const char* what, int err) {
  if (err == EPIPE || err == ECONNRESET) return make_error(Errc::io_error, kPeerClosed);
  return errno_error(what, err);
}

}  // namespace

bool is_peer_closed(const Error& e) {
  return e.code == Errc::io_error && e.message.find(kPeerClosed) != std::string::npos;
}

int poll_timeout_ms(Deadline deadline) {
  if (deadline == kNoDeadline) return -1;
  auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<long long>(ms, 1 << 30));
}

Status Channel::wait_for(short events, Deadline deadline) {
  for (;;) {
    pollfd p{socket_.get(), events, 0};
    int n = poll(&p, 1, poll_timeout_ms(deadline));
    if (n > 0) return ok();  // readable, writable, or an error/hang-up the next call reports
    if (n == 0) return make_error(Errc::timeout, "timed out waiting for the peer");
    if (errno != EINTR) return errno_error("poll");
  }
}

Status Channel::send(MsgType type, std::span<const std::uint8_t> payload, std::span<const int> fds,
                     Deadline deadline) {
  if (!socket_) return make_error(Errc::io_error, "the connection is closed");
  if (payload.size() > kMaxPayloadBytes)
    return make_error(Errc::invalid_argument, msg_type_name(type) + ": payload of " +
                                                  std::to_string(payload.size()) +
                                                  " bytes exceeds the protocol's limit");
  if (fds.size() > kMaxFdsPerMessage)
    return make_error(Errc::invalid_argument,
                      msg_type_name(type) + ": " + std::to_string(fds.size()) +
                          " fds exceed the limit of " + std::to_string(kMaxFdsPerMessage) +
                          " per message");
  for (int fd : fds)
    if (fd < 0) return make_error(Errc::invalid_argument, msg_type_name(type) + ": invalid fd");

  auto header = encode_header(type, payload.size());
  std::size_t total = header.size() + payload.size();
  std::size_t sent = 0;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
  while (sent < total) {
    iovec iov[2];
    int iovcnt = 0;
    if (sent < header.size()) {
      iov[iovcnt++] = {header.data() + sent, header.size() - sent};
      if (!payload.empty())
        iov[iovcnt++] = {const_cast<std::uint8_t*>(payload.data()), payload.size()};
    } else {
      std::size_t off = sent - header.size();
      iov[iovcnt++] = {const_cast<std::uint8_t*>(payload.data()) + off, payload.size() - off};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = iovcnt;
    if (sent == 0 && !fds.empty()) {  // the fds go with the first byte, once
      std::memset(control, 0, sizeof control);
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    ssize_t n = sendmsg(socket_.get(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      GCR_TRY(wait_for(POLLOUT, deadline));
      continue;
    }
    return transport_error("sendmsg", n < 0 ? errno : EPIPE);
  }
  return ok();
}

Status Channel::recv_exact(std::uint8_t* buf, std::size_t n, std::vector<UniqueFd>* fds,
                           Deadline deadline) {
  std::size_t got = 0;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kScmMaxFd)];
  while (got < n) {
    iovec iov{buf + got, n - got};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t r = recvmsg(socket_.get(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        GCR_TRY(wait_for(POLLIN, deadline));
        continue;
      }
      return transport_error("recvmsg", errno);
    }
    // Own every fd before looking at anything else, so that no error path leaks one.
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        fds->emplace_back(fd);
      }
    }
    if (msg.msg_flags & MSG_CTRUNC)  // the kernel dropped fds it could not install here
      return make_error(Errc::io_error,
                        "fds of a message were lost (MSG_CTRUNC): more than the protocol allows, "
                        "or this process reached its open-file limit (ulimit -n)");
    if (r == 0)
      return make_error(Errc::io_error,
                        got == 0 ? std::string(kPeerClosed)
                                 : std::string(kPeerClosed) + " in the middle of a message");
    got += static_cast<std::size_t>(r);
  }
  return ok();
}

Result<Message> Channel::recv(Deadline deadline, std::size_t max_fds) {
  if (!socket_) return make_error(Errc::io_error, "the connection is closed");
  Message m;
  std::uint8_t raw[kHeaderBytes];
  GCR_TRY(recv_exact(raw, sizeof raw, &m.fds, deadline));
  GCR_TRY_ASSIGN(Header h, decode_header(raw));
  m.type = h.type;
  m.minor = h.minor;
  m.payload.resize(h.payload_bytes);
  if (h.payload_bytes > 0) {
    Status s = recv_exact(m.payload.data(), m.payload.size(), &m.fds, deadline);
    if (!s && is_peer_closed(s.error()))
      return make_error(Errc::io_error, std::string(kPeerClosed) + " in the middle of a message");
    GCR_TRY(std::move(s));
  }
  if (m.fds.size() > max_fds)
    return make_error(Errc::protocol, msg_type_name(m.type) + " carried " +
                                          std::to_string(m.fds.size()) + " fds, at most " +
                                          std::to_string(max_fds) + " expected");
  return m;
}

Status Channel::wait_closed(Deadline deadline) {
  if (!socket_) return ok();
  for (;;) {
    std::uint8_t b;
    ssize_t r = ::recv(socket_.get(), &b, 1, MSG_DONTWAIT);
    if (r == 0) return ok();
    if (r > 0) return make_error(Errc::protocol, "the peer sent data after its last reply");
    if (errno == EINTR) continue;
    if (errno == ECONNRESET) return ok();
    if (errno != EAGAIN && errno != EWOULDBLOCK) return errno_error("recv");
    GCR_TRY(wait_for(POLLIN, deadline));
  }
}

}  // namespace gcr::control
