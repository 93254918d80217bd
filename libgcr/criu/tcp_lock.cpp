// gcrd's TCP lock and the end of repair mode (gcr/tcp_lock.h).
#include "gcr/tcp_lock.h"

#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace gcr::criu {

std::string TcpAddress::text() const {
  char b[32];
  std::snprintf(b, sizeof b, "%u.%u.%u.%u:%u", ip >> 24, (ip >> 16) & 0xff, (ip >> 8) & 0xff,
                ip & 0xff, static_cast<unsigned>(port));
  return b;
}

std::optional<TcpAddress> parse_tcp_address(const std::string& text) {
  unsigned a, b, c, d, port;
  char tail;
  if (std::sscanf(text.c_str(), "%u.%u.%u.%u:%u%c", &a, &b, &c, &d, &port, &tail) != 5)
    return std::nullopt;
  if (a > 255 || b > 255 || c > 255 || d > 255 || port == 0 || port > 65535) return std::nullopt;
  return TcpAddress{(a << 24) | (b << 16) | (c << 8) | d, static_cast<std::uint16_t>(port)};
}

namespace {

const char* iptables_restore() {
  for (const char* p : {"/usr/sbin/iptables-restore", "/sbin/iptables-restore",
                        "/usr/bin/iptables-restore", "/bin/iptables-restore"})
    if (::access(p, X_OK) == 0) return p;
  return nullptr;
}

std::string ip_of(const TcpAddress& a) {
  std::string t = a.text();
  return t.substr(0, t.rfind(':'));
}

// The network namespace of process `pid` (0: none, which means gcrd's own), held open so that the
// lock can be removed after the process is gone (a checkpoint that ended it).
Result<UniqueFd> open_netns(pid_t pid) {
  if (pid <= 0) return UniqueFd();
  UniqueFd ns(::open(("/proc/" + std::to_string(pid) + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns) return errno_error("opening the network namespace of process " + std::to_string(pid));
  return ns;
}

// Feeds `rules` to iptables-restore --noflush in the network namespace `ns` (none: gcrd's).
Status restore_rules(const UniqueFd& ns, pid_t netns_pid, const std::string& rules) {
  const char* tool = iptables_restore();
  if (!tool)
    return Error{Errc::unsupported,
                 "carrying TCP connections needs iptables-restore (Debian package iptables), "
                 "which gcrd did not find in /usr/sbin or /sbin"};
  int in[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0) return errno_error("a pipe for iptables-restore");
  UniqueFd in_r(in[0]), in_w(in[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) return errno_error("a pipe for iptables-restore");
  UniqueFd err_r(err[0]), err_w(err[1]);
  pid_t child = ::fork();
  if (child < 0) return errno_error("starting iptables-restore");
  if (child == 0) {
    if (ns && ::setns(ns.get(), CLONE_NEWNET) != 0) ::_exit(126);
    ::dup2(in_r.get(), 0);
    ::dup2(err_w.get(), 1);
    ::dup2(err_w.get(), 2);
    const char* argv[] = {tool, "-w", "--noflush", nullptr};
    ::execv(tool, const_cast<char* const*>(argv));
    ::_exit(127);
  }
  in_r.reset();
  err_w.reset();
  const char* p = rules.data();
  std::size_t left = rules.size();
  while (left > 0) {
    ssize_t n = ::write(in_w.get(), p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  in_w.reset();
  std::string said;
  char buf[512];
  for (ssize_t n; (n = ::read(err_r.get(), buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    if (said.size() < 4096) said.append(buf, static_cast<std::size_t>(n));
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return ok();
  while (!said.empty() && said.back() == '\n') said.pop_back();
  if (WIFEXITED(status) && WEXITSTATUS(status) == 126)
    said = "cannot enter the network namespace of process " + std::to_string(netns_pid);
  return Error{Errc::io_error,
               std::string("iptables-restore failed") + (said.empty() ? "" : ": " + said)};
}

std::string drop_rule(const std::string& chain, const TcpAddress& from, const TcpAddress& to) {
  return "-A " + chain + " -p tcp -s " + ip_of(from) + "/32 --sport " + std::to_string(from.port) +
         " -d " + ip_of(to) + "/32 --dport " + std::to_string(to.port) + " -j DROP\n";
}

}  // namespace

TcpLock& TcpLock::operator=(TcpLock&& other) noexcept {
  if (this != &other) {
    release();
    netns_pid_ = other.netns_pid_;
    netns_ = std::move(other.netns_);
    chain_ = std::move(other.chain_);
    open_ = other.open_;
    other.chain_.clear();
  }
  return *this;
}

TcpLock TcpLock::adopt(pid_t netns_pid, std::string chain) {
  TcpLock lock;
  lock.netns_pid_ = netns_pid;
  if (auto ns = open_netns(netns_pid)) lock.netns_ = std::move(ns).value();
  lock.chain_ = std::move(chain);  // a namespace already gone took the chain with it
  return lock;
}

Result<TcpLock> TcpLock::engage(pid_t in_netns_of, const std::vector<TcpConnection>& connections) {
  static std::atomic<unsigned> next{0};
  TcpLock lock;
  GCR_TRY_ASSIGN(lock.netns_, open_netns(in_netns_of));
  std::string chain = "GCR-" + std::to_string(::getpid()) + "-" + std::to_string(next++);
  std::string rules = "*filter\n:" + chain + " - [0:0]\n";
  for (const TcpConnection& c : connections) {
    rules += drop_rule(chain, c.local, c.remote);
    rules += drop_rule(chain, c.remote, c.local);
  }
  rules += "-I INPUT 1 -j " + chain + "\n-I OUTPUT 1 -j " + chain + "\nCOMMIT\n";
  GCR_TRY(restore_rules(lock.netns_, in_netns_of, rules)
              .context("locking " + std::to_string(connections.size()) + " TCP connection(s)"));
  lock.netns_pid_ = in_netns_of;
  lock.chain_ = std::move(chain);
  return lock;
}

void TcpLock::open() {
  if (chain_.empty() || open_) return;
  if (restore_rules(netns_, netns_pid_, "*filter\n-I " + chain_ + " 1 -j RETURN\nCOMMIT\n"))
    open_ = true;
  else
    release();
}

void TcpLock::release() {
  if (chain_.empty()) return;
  std::string rules = "*filter\n-D INPUT -j " + chain_ + "\n-D OUTPUT -j " + chain_ + "\n-F " +
                      chain_ + "\n-X " + chain_ + "\nCOMMIT\n";
  // A namespace that is gone (adopted after its processes died) took the chain with it.
  const bool gone = netns_pid_ > 0 && !netns_;
  if (Status s = gone ? ok() : restore_rules(netns_, netns_pid_, rules); !s)
    std::fprintf(stderr, "gcrd: unlocking TCP connections (chain %s): %s\n", chain_.c_str(),
                 s.error().message.c_str());
  chain_.clear();
  open_ = false;
  netns_.reset();
}

Result<RepairedSockets> RepairedSockets::take(const std::vector<TcpEnd>& ends) {
  RepairedSockets out;
  for (const TcpEnd& e : ends) {
    UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, e.pid, 0)));
    if (!pidfd) return errno_error("pidfd_open of process " + std::to_string(e.pid));
    UniqueFd fd(static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd.get(), e.fd, 0)));
    if (!fd)
      return errno_error("taking fd " + std::to_string(e.fd) + " of process " +
                         std::to_string(e.pid) + " (a TCP connection the checkpoint carries)");
    Socket s;
    socklen_t len = sizeof s.reuse;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &s.reuse, &len) != 0)
      return errno_error("reading SO_REUSEADDR of fd " + std::to_string(e.fd) + " of process " +
                         std::to_string(e.pid));
    s.fd = std::move(fd);
    out.sockets_.push_back(std::move(s));
  }
  return out;
}

void RepairedSockets::settle(std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    bool quiet = true;
    for (Socket& s : sockets_) {
      int one = 1;  // sends the ACK the kernel holds back, if any
      (void)::setsockopt(s.fd.get(), IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
      int unacked = 0;
      if (::ioctl(s.fd.get(), SIOCOUTQ, &unacked) == 0 && unacked > 0) quiet = false;
    }
    if (quiet || std::chrono::steady_clock::now() >= deadline) return;
    ::usleep(200);
  }
}

void RepairedSockets::end_repair() {
  for (Socket& s : sockets_) {
    int off = 0;  // TCP_REPAIR_OFF: the kernel sends a window probe
    if (::setsockopt(s.fd.get(), IPPROTO_TCP, TCP_REPAIR, &off, sizeof off) != 0)
      std::fprintf(stderr, "gcrd: ending TCP repair mode: %s\n", std::strerror(errno));
    (void)::setsockopt(s.fd.get(), SOL_SOCKET, SO_REUSEADDR, &s.reuse, sizeof s.reuse);
  }
  sockets_.clear();
}

}  // namespace gcr::criu
