// Note [Connections a killed run left behind] (gcr/tcp_orphans.h).
#include "gcr/tcp_orphans.h"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "gcr/unique_fd.h"

namespace gcr::criu {
namespace {

struct DiagRequest {
  nlmsghdr header;
  inet_diag_req_v2 body;
};

bool same_end(const inet_diag_sockid& id, const TcpAddress& local, const TcpAddress& remote) {
  return ntohl(id.idiag_src[0]) == local.ip && ntohs(id.idiag_sport) == local.port &&
         ntohl(id.idiag_dst[0]) == remote.ip && ntohs(id.idiag_dport) == remote.port;
}

bool carried(const inet_diag_sockid& id, const std::vector<TcpConnection>& connections) {
  for (const TcpConnection& c : connections)
    if (same_end(id, c.local, c.remote) || same_end(id, c.remote, c.local)) return true;
  return false;
}

Status send_request(int fd, std::uint16_t type, std::uint16_t flags, const inet_diag_req_v2& body) {
  DiagRequest req{};
  req.header.nlmsg_len = sizeof req;
  req.header.nlmsg_type = type;
  req.header.nlmsg_flags = static_cast<std::uint16_t>(NLM_F_REQUEST | flags);
  req.body = body;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(fd, &req, sizeof req, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) < 0)
    return errno_error("sock_diag request");
  return ok();
}

}  // namespace

Result<unsigned> end_orphaned_connections(const std::vector<TcpConnection>& connections) {
  if (connections.empty()) return 0u;
  UniqueFd fd(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (!fd) return errno_error("a sock_diag socket");
  inet_diag_req_v2 all{};
  all.sdiag_family = AF_INET;
  all.sdiag_protocol = IPPROTO_TCP;
  all.idiag_states = ~0u;
  GCR_TRY(send_request(fd.get(), SOCK_DIAG_BY_FAMILY, NLM_F_DUMP, all));
  std::vector<inet_diag_msg> orphans;
  alignas(nlmsghdr) char buf[16384];
  for (bool done = false; !done;) {
    ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error("reading sock_diag");
    }
    int left = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type == NLMSG_DONE) {
        done = true;
        break;
      }
      if (h->nlmsg_type == NLMSG_ERROR) {
        auto* e = static_cast<nlmsgerr*>(NLMSG_DATA(h));
        return Error{Errc::unsupported, std::string("sock_diag refused to list TCP sockets: ") +
                                            std::strerror(-e->error)};
      }
      auto* m = static_cast<inet_diag_msg*>(NLMSG_DATA(h));
      if (m->idiag_inode == 0 && carried(m->id, connections)) orphans.push_back(*m);
    }
  }
  unsigned ended = 0;
  int refused = 0;
  for (const inet_diag_msg& m : orphans) {
    inet_diag_req_v2 one{};
    one.sdiag_family = AF_INET;
    one.sdiag_protocol = IPPROTO_TCP;
    one.idiag_states = 1u << m.idiag_state;
    one.id = m.id;
    if (!send_request(fd.get(), SOCK_DESTROY, NLM_F_ACK, one)) continue;
    ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    auto* h = reinterpret_cast<nlmsghdr*>(buf);
    if (n > 0 && h->nlmsg_type == NLMSG_ERROR) {
      const int error = static_cast<nlmsgerr*>(NLMSG_DATA(h))->error;
      if (error == 0)
        ++ended;
      else if (!refused)
        refused = -error;
    }
  }
  if (refused && !ended)
    return Error{Errc::unsupported,
                 std::to_string(orphans.size()) + " left behind, not ended (SOCK_DESTROY: " +
                     std::strerror(refused) + "; a kernel without CONFIG_INET_DIAG_DESTROY?)"};
  return ended;
}

}  // namespace gcr::criu
