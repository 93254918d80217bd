#include "tcp_socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "socket.h"

namespace mp {

namespace {

// The addresses `at` names (numeric or resolved); empty with *error set if none.
addrinfo* resolve(const HostPort& at, bool passive, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* list = nullptr;
  const std::string port = std::to_string(at.port);
  int r = ::getaddrinfo(at.host.empty() ? nullptr : at.host.c_str(), port.c_str(), &hints, &list);
  if (r != 0) {
    *error = "cannot resolve '" + at.host + "': " + ::gai_strerror(r);
    return nullptr;
  }
  return list;
}

struct AddrInfoList {
  addrinfo* list;
  ~AddrInfoList() {
    if (list) ::freeaddrinfo(list);
  }
};

HostPort from_sockaddr(const sockaddr_storage& sa) {
  char text[INET6_ADDRSTRLEN] = "?";
  HostPort out;
  if (sa.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(sa);
    ::inet_ntop(AF_INET, &v4.sin_addr, text, sizeof text);
    out.port = ntohs(v4.sin_port);
  } else if (sa.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(sa);
    ::inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof text);
    out.port = ntohs(v6.sin6_port);
  }
  out.host = text;
  return out;
}

bool retryable(int e) {
  return e == ECONNREFUSED || e == ETIMEDOUT || e == EHOSTUNREACH || e == ENETUNREACH ||
         e == EAGAIN || e == EINTR;
}

}  // namespace

std::string HostPort::text() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

bool parse_host_port(const std::string& text, HostPort* out) {
  std::size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 == text.size()) return false;
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  char* end = nullptr;
  long port = std::strtol(text.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port < 0 || port > 65535 || host.empty()) return false;
  out->host = host;
  out->port = static_cast<int>(port);
  return true;
}

UniqueFd tcp_listen(const HostPort& at, int backlog, std::string* error) {
  AddrInfoList addrs{resolve(at, true, error)};
  for (addrinfo* a = addrs.list; a; a = a->ai_next) {
    UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd) continue;
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd.get(), backlog) == 0)
      return fd;
    *error = "cannot listen on " + at.text() + ": " + std::strerror(errno);
  }
  return UniqueFd();
}

HostPort tcp_local_address(const UniqueFd& socket) {
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  if (::getsockname(socket.get(), reinterpret_cast<sockaddr*>(&sa), &len) != 0)
    fail_errno("getsockname");
  return from_sockaddr(sa);
}

int tcp_free_port() {
  std::string error;
  UniqueFd fd = tcp_listen({"127.0.0.1", 0}, 1, &error);
  if (!fd) {
    errno = EADDRNOTAVAIL;
    fail_errno(error);
  }
  return tcp_local_address(fd).port;
}

UniqueFd tcp_connect(const HostPort& to, int timeout_ms, std::string* error,
                     const std::string& from) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int last = 0;
    {
      AddrInfoList addrs{resolve(to, false, error)};
      if (!addrs.list) return UniqueFd();
      for (addrinfo* a = addrs.list; a; a = a->ai_next) {
        UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
        if (!fd) fail_errno("socket(TCP)");
        if (!from.empty()) {
          AddrInfoList source{resolve({from, 0}, true, error)};
          if (!source.list) return UniqueFd();
          if (::bind(fd.get(), source.list->ai_addr, source.list->ai_addrlen) != 0) {
            *error = "cannot bind " + from + ": " + std::strerror(errno);
            return UniqueFd();
          }
        }
        if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0) {
          int one = 1;
          ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          return fd;
        }
        last = errno;
      }
    }
    *error = std::strerror(last);
    if (!retryable(last) || std::chrono::steady_clock::now() > deadline) return UniqueFd();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

UniqueFd tcp_accept(const UniqueFd& listener, int timeout_ms) {
  if (!wait_readable(listener.get(), timeout_ms)) return UniqueFd();
  int fd;
  do fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) fail_errno("accept");
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return UniqueFd(fd);
}

bool send_all(int fd, const void* data, std::size_t size, int flags) {
  auto* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::send(fd, p, size, flags | MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

bool recv_all(int fd, void* data, std::size_t size) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = ::recv(fd, p, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = 0;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

bool wait_readable(int fd, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int left = -1;
    if (timeout_ms >= 0) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      left = ms.count() > 0 ? static_cast<int>(ms.count()) : 0;
    }
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, left);
    if (r > 0) return true;
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) errno = ETIMEDOUT;
    return false;
  }
}

}  // namespace mp
