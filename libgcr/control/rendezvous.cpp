// The rendezvous sockets and the credential checks on both ends (rendezvous.h; docs/protocol.md
// §2, §8).
#include "rendezvous.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>
#include <thread>

namespace gcr::control {
namespace {

constexpr int kSliceMs = 50;

// The sockaddr of an abstract name: sun_path[0] = 0, then the name, no terminator.
socklen_t abstract_address(std::string_view name, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  std::memcpy(addr->sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

// A socket(AF_UNIX) in the network namespace of `peer` (Note [Rendezvous in the process's network
// namespace]), or in the caller's when they are one or `peer` is 0.
Result<UniqueFd> socket_in_netns_of(pid_t peer) {
  auto plain = [] {
    return UniqueFd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  };
  if (peer <= 0) return plain();
  std::string path = "/proc/" + std::to_string(peer) + "/ns/net";
  struct stat theirs {
  }, ours{};
  if (stat(path.c_str(), &theirs) != 0 || stat("/proc/thread-self/ns/net", &ours) != 0 ||
      (theirs.st_dev == ours.st_dev && theirs.st_ino == ours.st_ino))
    return plain();
  UniqueFd ns(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns) return errno_error("open " + path);
  UniqueFd made;
  int err = 0;
  std::thread([&] {  // this thread alone enters the namespace, and ends there
    if (setns(ns.get(), CLONE_NEWNET) != 0) {
      err = errno;
      return;
    }
    made = plain();
    if (!made) err = errno;
  })
      .join();
  if (err == EPERM)
    return make_error(Errc::permission_denied,
                      "process " + std::to_string(peer) +
                          " has a network namespace of its own (a container?), and only root "
                          "(CAP_SYS_ADMIN) can reach its gcr agent thread there");
  if (err)
    return make_error(Errc::io_error, "entering the network namespace of process " +
                                          std::to_string(peer) + ": " + std::strerror(err));
  return made;
}

}  // namespace

bool is_rendezvous_name(std::string_view name) noexcept {
  if (name.size() != kRendezvousPrefix.size() + 32 ||
      name.substr(0, kRendezvousPrefix.size()) != kRendezvousPrefix)
    return false;
  for (char c : name.substr(kRendezvousPrefix.size()))
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

Result<PeerCred> peer_cred(int socket) {
  ucred c{};
  socklen_t len = sizeof c;
  if (getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &c, &len) != 0)
    return errno_error("getsockopt(SO_PEERCRED)");
  return PeerCred{c.pid, c.uid, c.gid};
}

bool caller_allowed(uid_t caller_uid, uid_t process_uid) noexcept {
  return caller_uid == 0 || caller_uid == process_uid;
}

Result<Rendezvous> Rendezvous::listen(pid_t peer) {
  unsigned char random[16];
  std::size_t got = 0;
  while (got < sizeof random) {
    ssize_t n = getrandom(random + got, sizeof random - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error("getrandom");
    got += static_cast<std::size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  Rendezvous rv;
  rv.name_ = std::string(kRendezvousPrefix);
  for (unsigned char b : random) {
    rv.name_ += kHex[b >> 4];
    rv.name_ += kHex[b & 15];
  }
  GCR_TRY_ASSIGN(rv.socket_, socket_in_netns_of(peer));
  if (!rv.socket_) return errno_error("socket(AF_UNIX)");
  sockaddr_un addr;
  socklen_t len = abstract_address(rv.name_, &addr);
  if (bind(rv.socket_.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0)
    return errno_error("bind(@" + rv.name_ + ")");
  if (::listen(rv.socket_.get(), 4) != 0) return errno_error("listen(@" + rv.name_ + ")");
  return rv;
}

Result<UniqueFd> Rendezvous::accept_from(pid_t pid, Deadline deadline,
                                         const std::function<Status()>& still_waiting) {
  for (;;) {
    int left = poll_timeout_ms(deadline);
    if (left == 0)
      return make_error(Errc::timeout, "no connection on @" + name_ + " before the deadline");
    pollfd p{socket_.get(), POLLIN, 0};
    int n = poll(&p, 1, left < 0 || left > kSliceMs ? kSliceMs : left);
    if (n < 0 && errno != EINTR) return errno_error("poll(@" + name_ + ")");
    if (n > 0) {
      UniqueFd conn(accept4(socket_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!conn) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
          return errno_error("accept(@" + name_ + ")");
      } else {
        GCR_TRY_ASSIGN(PeerCred cred, peer_cred(conn.get()));
        if (cred.pid == pid) return conn;
        // Anyone in the network namespace can see the name in /proc/net/unix and connect first:
        // such a connection is dropped and the wait goes on.
      }
    }
    if (still_waiting) GCR_TRY(still_waiting());
  }
}

Result<UniqueFd> connect_rendezvous(std::string_view name) {
  if (!is_rendezvous_name(name))
    return make_error(Errc::invalid_argument, "not a gcr rendezvous name");
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return errno_error("socket(AF_UNIX)");
  sockaddr_un addr;
  socklen_t len = abstract_address(name, &addr);
  while (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    if (errno == EINTR) continue;
    return errno_error("connect(@" + std::string(name) + ")");
  }
  return fd;
}

}  // namespace gcr::control
