#include "socket.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace mp {

namespace {

socklen_t abstract_address(const std::string& name, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  if (name.size() + 1 > sizeof(addr->sun_path)) {
    std::fprintf(stderr, "mp_train: socket name '%s' is too long\n", name.c_str());
    std::exit(2);
  }
  std::memcpy(addr->sun_path + 1, name.data(), name.size());  // sun_path[0] == 0: abstract
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

UniqueFd stream_socket() {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) fail_errno("socket(AF_UNIX)");
  return fd;
}

}  // namespace

void fail_errno(const std::string& what) {
  int e = errno;
  std::fflush(stdout);
  std::fprintf(stderr, "mp_train: %s: %s\n", what.c_str(), std::strerror(e));
  std::exit(2);
}

UniqueFd listen_abstract(const std::string& name) {
  UniqueFd fd = stream_socket();
  sockaddr_un addr;
  socklen_t len = abstract_address(name, &addr);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) fail_errno("bind @" + name);
  if (::listen(fd.get(), 4) != 0) fail_errno("listen @" + name);
  return fd;
}

UniqueFd accept_one(const UniqueFd& listener) {
  int fd;
  do fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) fail_errno("accept");
  return UniqueFd(fd);
}

UniqueFd connect_abstract(const std::string& name, int timeout_ms) {
  sockaddr_un addr;
  socklen_t len = abstract_address(name, &addr);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    UniqueFd fd = stream_socket();
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0) return fd;
    // ECONNREFUSED: the peer has not bound its name yet.
    if (errno != ECONNREFUSED && errno != ENOENT && errno != EAGAIN) {
      fail_errno("connect @" + name);
    }
    if (std::chrono::steady_clock::now() > deadline)
      fail_errno("connect @" + name + " (timed out)");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void send_message(const UniqueFd& socket, const void* data, std::size_t size, int fd) {
  iovec iov{const_cast<void*>(data), size};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  ssize_t n;
  do n = ::sendmsg(socket.get(), &msg, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(size)) fail_errno("sendmsg");  // messages are far below a page
}

bool receive_message(const UniqueFd& socket, void* data, std::size_t size, UniqueFd* fd) {
  auto* bytes = static_cast<char*>(data);
  std::size_t got = 0;
  while (got < size) {
    iovec iov{bytes + got, size - got};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n = ::recvmsg(socket.get(), &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_errno("recvmsg");
    if (n == 0) {
      if (got == 0) return false;
      errno = EPIPE;
      fail_errno("recvmsg (peer closed mid-message)");
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      int received;
      std::memcpy(&received, CMSG_DATA(c), sizeof(int));
      if (!fd) {
        ::close(received);
        errno = EPROTO;
        fail_errno("recvmsg (an fd nobody expected)");
      }
      fd->reset(received);
    }
    got += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace mp
