// Reading a process tree's open files from /proc (gcr/process_tree.h).
#include "gcr/process_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "gcr/unique_fd.h"

namespace gcr::criu {
namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kGhostLimit = 64ull << 20;  // --ghost-limit gcr passes to CRIU

struct KindName {
  FileKind kind;
  const char* name;
};
constexpr KindName kKindNames[] = {
    {FileKind::regular, "file"},      {FileKind::deleted, "deleted"},
    {FileKind::terminal, "tty"},      {FileKind::pty_master, "ptmx"},
    {FileKind::pipe, "pipe"},         {FileKind::fifo, "fifo"},
    {FileKind::dev_null, "chardev"},  {FileKind::nvidia, "nvidia"},
    {FileKind::unix_socket, "unix"},  {FileKind::tcp_socket, "tcp"},
    {FileKind::udp_socket, "udp"},    {FileKind::other_socket, "socket"},
    {FileKind::io_uring, "io_uring"}, {FileKind::anon, "anon"},
    {FileKind::other, "other"},
};

std::string read_link(const std::string& p) {
  char buf[4096];
  ssize_t n = readlink(p.c_str(), buf, sizeof buf - 1);
  if (n < 0) return {};
  return std::string(buf, static_cast<std::size_t>(n));
}

// The ppid and session of a task, from /proc/PID/stat (after the command's closing paren).
bool stat_fields(pid_t pid, pid_t& ppid, pid_t& sid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return false;
  auto close = stat.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(stat.substr(close + 2));
  char state;
  pid_t pgrp;
  rest >> state >> ppid >> pgrp >> sid;
  return static_cast<bool>(rest);
}

// The names in a directory (readdir: processes and fds come and go while it is read, which
// std::filesystem's iterators turn into exceptions).
std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (const dirent* e = readdir(d))
    if (e->d_name[0] != '.') out.emplace_back(e->d_name);
  closedir(d);
  return out;
}

}  // namespace

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (pid_t pid : proc_pids()) {
    pid_t ppid = 0, sid = 0;
    if (stat_fields(pid, ppid, sid) && ppid == parent) out.push_back(pid);
  }
  return out;
}

std::optional<std::uint64_t> process_start_time(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return std::nullopt;
  auto close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(stat.substr(close + 2));
  // After the comm: state (3) ... starttime (22).
  std::string field;
  for (int i = 3; i < 22; ++i)
    if (!(rest >> field)) return std::nullopt;
  std::uint64_t start = 0;
  if (!(rest >> start)) return std::nullopt;
  return start;
}

std::optional<std::string> process_status_field(pid_t pid, std::string_view name) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.size() <= name.size() || line.compare(0, name.size(), name) != 0 ||
        line[name.size()] != ':')
      continue;
    auto value = line.find_first_not_of(" \t", name.size() + 1);
    return value == std::string::npos ? std::string() : line.substr(value);
  }
  return std::nullopt;
}

std::optional<bool> maps_libcuda(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/maps");
  bool any = false;
  for (std::string line; std::getline(in, line);) {
    any = true;
    auto slash = line.rfind('/');
    if (slash != std::string::npos && line.compare(slash + 1, 10, "libcuda.so") == 0) return true;
  }
  if (!any) return std::nullopt;
  return false;
}

namespace {

// root and every descendant, breadth first.
std::vector<pid_t> descendants(pid_t root) {
  std::map<pid_t, std::vector<pid_t>> children;
  for (pid_t pid : proc_pids()) {
    pid_t ppid = 0, sid = 0;
    if (stat_fields(pid, ppid, sid)) children[ppid].push_back(pid);
  }
  std::vector<pid_t> out = {root};
  for (std::size_t i = 0; i < out.size(); ++i)
    for (pid_t c : children[out[i]]) out.push_back(c);
  return out;
}

// flags and pos from /proc/PID/fdinfo/N.
void read_fdinfo(pid_t pid, int fd, OpenFile& f) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/fdinfo/" + std::to_string(fd));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("pos:", 0) == 0) f.pos = std::strtoull(line.c_str() + 4, nullptr, 10);
    if (line.rfind("flags:", 0) == 0)
      f.flags = static_cast<int>(std::strtol(line.c_str() + 6, nullptr, 8));
  }
}

std::uint64_t inode_of(const std::string& link) {  // "pipe:[123]", "socket:[123]"
  auto open = link.find('[');
  return open == std::string::npos ? 0 : std::strtoull(link.c_str() + open + 1, nullptr, 10);
}

std::string hex(std::uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(v));
  return b;
}

// TCP and UDP sockets of the task's network namespace: inode -> (kind, state, "local -> remote").
struct InetSocket {
  FileKind kind;
  int state;
  std::string detail;
};
std::string format_address(const std::string& hexaddr) {
  auto colon = hexaddr.find(':');
  if (colon == std::string::npos) return hexaddr;
  std::string a = hexaddr.substr(0, colon);
  unsigned port = static_cast<unsigned>(std::strtoul(hexaddr.c_str() + colon + 1, nullptr, 16));
  if (a.size() == 8) {
    std::uint32_t v = static_cast<std::uint32_t>(std::strtoul(a.c_str(), nullptr, 16));
    char b[32];
    std::snprintf(b, sizeof b, "%u.%u.%u.%u:%u", v & 0xff, (v >> 8) & 0xff, (v >> 16) & 0xff,
                  v >> 24, port);
    return b;
  }
  return "[" + a + "]:" + std::to_string(port);
}
void read_inet(pid_t pid, const char* table, FileKind kind,
               std::map<std::uint64_t, InetSocket>& out) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/net/" + table);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string sl, local, remote, st, queues, tr, retr, uid, timeout;
    std::uint64_t inode = 0;
    f >> sl >> local >> remote >> st >> queues >> tr >> retr >> uid >> timeout >> inode;
    if (!f || inode == 0) continue;
    out[inode] = {kind, static_cast<int>(std::strtol(st.c_str(), nullptr, 16)),
                  format_address(local) + " -> " + format_address(remote)};
  }
}

// Unix sockets of gcr's network namespace, via sock_diag: inode -> what UNIX_DIAG says of it.
struct UnixSocket {
  std::uint64_t peer = 0;  // 0: none
  int type = 0;            // SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET
  std::uint32_t queued = 0;
};
std::map<std::uint64_t, UnixSocket> unix_sockets() {
  std::map<std::uint64_t, UnixSocket> out;
  UniqueFd nl(socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (!nl) return out;
  struct {
    nlmsghdr nlh;
    unix_diag_req req;
  } msg{};
  msg.nlh.nlmsg_len = sizeof msg;
  msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.nlh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  msg.req.sdiag_family = AF_UNIX;
  msg.req.udiag_states = ~0u;
  msg.req.udiag_show = UDIAG_SHOW_PEER | UDIAG_SHOW_RQLEN;
  if (send(nl.get(), &msg, sizeof msg, 0) != static_cast<ssize_t>(sizeof msg)) return out;
  alignas(nlmsghdr) char buf[32768];
  for (;;) {
    ssize_t n = recv(nl.get(), buf, sizeof buf, 0);
    if (n <= 0) return out;
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, static_cast<unsigned>(n));
         h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) return out;
      auto* d = static_cast<unix_diag_msg*>(NLMSG_DATA(h));
      UnixSocket sk;
      sk.type = d->udiag_type;
      int len = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof *d));
      for (auto* a = reinterpret_cast<rtattr*>(d + 1); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
        if (a->rta_type == UNIX_DIAG_PEER) sk.peer = *static_cast<std::uint32_t*>(RTA_DATA(a));
        // A listening socket's "queue" is its connections not yet accepted: not bytes. Else
        // what waits to be read, and what this socket sent that its peer holds unread (for a
        // datagram socket the receive queue counts only the first datagram).
        if (a->rta_type == UNIX_DIAG_RQLEN && d->udiag_state != 10 /* TCP_LISTEN */) {
          const auto* q = static_cast<unix_diag_rqlen*>(RTA_DATA(a));
          sk.queued = q->udiag_rqueue + q->udiag_wqueue;
        }
      }
      out[d->udiag_ino] = sk;
    }
  }
}

}  // namespace

std::map<std::uint64_t, UnixSocketState> unix_socket_states(const std::set<std::uint64_t>& inodes) {
  std::map<std::uint64_t, UnixSocketState> out;
  for (const auto& [ino, sk] : unix_sockets())
    if (inodes.contains(ino)) out[ino] = {sk.type, sk.queued};
  return out;
}

namespace {

struct SocketHolder {
  pid_t pid = 0;
  std::string name;  // "pid 123 (comm)"
};
// The process holding socket inode `ino`; pid 0 when none is found.
SocketHolder holder_of_socket(std::uint64_t ino) {
  const std::string want = "socket:[" + std::to_string(ino) + "]";
  for (pid_t pid : proc_pids()) {
    const std::string dir = "/proc/" + std::to_string(pid);
    for (const std::string& fd : names_in(dir + "/fd"))
      if (read_link(dir + "/fd/" + fd) == want) {
        std::ifstream comm(dir + "/comm");
        std::string c;
        std::getline(comm, c);
        return {pid, "pid " + std::to_string(pid) + " (" + c + ")"};
      }
  }
  return {};
}

// gcr's own control connections (gcr ps, another gcr command) come and go: they are gcrd's or a
// gcr binary's beside it, which is what /proc/PID/exe says (a process cannot change that).
bool is_gcr_itself(pid_t pid) {
  if (pid == getpid()) return true;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec);
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (exe.empty() || self.empty()) return false;
  for (const fs::path& p : {self.parent_path() / "gcr", self.parent_path() / "../../bin/gcr"})
    if (fs::equivalent(exe, p, ec)) return true;
  return false;
}

std::string where(const OpenFile& f) {
  return "fd " + std::to_string(f.fd) + " of pid " + std::to_string(f.pid);
}

void classify(OpenFile& f, const std::string& procfd) {
  const std::string& p = f.path;
  struct stat st {};
  bool have_stat = ::stat(procfd.c_str(), &st) == 0;
  if (p.rfind("pipe:[", 0) == 0) {
    f.kind = FileKind::pipe;
    f.key = p;
  } else if (p.rfind("socket:[", 0) == 0) {
    f.kind = FileKind::other_socket;  // refined by the caller from /proc/net and sock_diag
  } else if (p == "anon_inode:[io_uring]") {
    f.kind = FileKind::io_uring;
  } else if (p.rfind("anon_inode:", 0) == 0 || p.rfind("/memfd:", 0) == 0) {
    f.kind = FileKind::anon;
  } else if (have_stat && S_ISREG(st.st_mode) && st.st_nlink == 0) {
    f.kind = FileKind::deleted;  // not the " (deleted)" in the name: a file may be called that
    f.size = static_cast<std::uint64_t>(st.st_size);
  } else if (have_stat && S_ISCHR(st.st_mode)) {
    unsigned maj = major(st.st_rdev), min = minor(st.st_rdev);
    if (p.rfind("/dev/nvidia", 0) == 0) {
      f.kind = FileKind::nvidia;
    } else if (maj == 5 && min == 2) {
      f.kind = FileKind::pty_master;
    } else if ((maj >= 136 && maj <= 143) || maj == 4 || (maj == 5 && min <= 1)) {
      f.kind = FileKind::terminal;
      f.key = "tty[" + hex(st.st_rdev) + ":" + hex(st.st_dev) + "]";
    } else {
      f.kind = FileKind::dev_null;
    }
  } else if (have_stat && S_ISFIFO(st.st_mode)) {
    f.kind = FileKind::fifo;
  } else if (have_stat && S_ISREG(st.st_mode) && !p.empty() && p[0] == '/') {
    f.kind = FileKind::regular;
    f.size = static_cast<std::uint64_t>(st.st_size);
    f.key = p.substr(1);
  } else {
    f.kind = FileKind::other;
  }
}

// Escapes '\\', tab and newline so that a value fits one tab-separated field of one line.
std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}
std::string unescape(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    char c = s[++i];
    out += c == 't' ? '\t' : c == 'n' ? '\n' : c;
  }
  return out;
}

}  // namespace

const char* file_kind_name(FileKind kind) noexcept {
  for (const auto& k : kKindNames)
    if (k.kind == kind) return k.name;
  return "other";
}

FileKind file_kind_from_name(const std::string& name) noexcept {
  for (const auto& k : kKindNames)
    if (name == k.name) return k.kind;
  return FileKind::other;
}

std::vector<pid_t> tree_pids(pid_t root) {
  if (root <= 1) return {};  // no tree: 0 or init would be every process
  return descendants(root);
}

void kill_tree(pid_t root) {
  std::vector<pid_t> tree = tree_pids(root);
  for (auto it = tree.rbegin(); it != tree.rend(); ++it) kill(*it, SIGKILL);
}

std::vector<pid_t> proc_pids() {
  std::vector<pid_t> out;
  for (const std::string& name : names_in("/proc"))
    if (name.find_first_not_of("0123456789") == std::string::npos)
      out.push_back(static_cast<pid_t>(std::stol(name)));
  return out;
}

// The session id `pid` has in its own pid namespace (NSsid's last) is 0: its leader is outside.
static bool session_outside_namespace(pid_t pid) {
  auto nssid = process_status_field(pid, "NSsid");
  if (!nssid) return false;
  std::istringstream fields(*nssid);
  long last = -1;
  for (long v; fields >> v;) last = v;
  return last == 0;
}

bool ProcessTree::has_outside_terminal() const {
  return std::any_of(files.begin(), files.end(),
                     [](const OpenFile& f) { return f.kind == FileKind::terminal && f.external; });
}

bool ProcessTree::shell_job() const {
  return !root_is_session_leader || has_outside_terminal();
}

std::vector<std::string> ProcessTree::dump_arguments() const {
  std::vector<std::string> args;
  if (shell_job()) args.push_back("--shell-job");
  std::set<std::string> ttys;
  for (const auto& f : files)
    if (f.kind == FileKind::terminal && f.external && ttys.insert(f.key).second) {
      args.push_back("--external");
      args.push_back(f.key);
    }
  args.push_back("--ghost-limit");
  args.push_back(std::to_string(kGhostLimit));
  return args;
}

// The regular files `pid` maps (see ProcessTree::mapped), each once.
static void read_mapped_files(pid_t pid, std::vector<OpenFile>& out) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::map<std::string, int> flags;  // path -> O_RDONLY or O_RDWR
  for (std::string line; std::getline(maps, line);) {
    // "ADDR-ADDR PERMS OFFSET DEV INODE PATH": the path is what follows the inode, spaces and all.
    std::istringstream in(line);
    std::string range, perms, offset, dev, inode;
    if (!(in >> range >> perms >> offset >> dev >> inode) || inode == "0") continue;
    std::string path;
    std::getline(in >> std::ws, path);
    if (path.empty() || path[0] != '/' || path.ends_with(" (deleted)")) continue;
    const bool shared_writable = perms.size() >= 4 && perms[1] == 'w' && perms[3] == 's';
    int& f = flags.try_emplace(path, O_RDONLY).first->second;
    if (shared_writable) f = O_RDWR;
  }
  for (const auto& [path, f] : flags) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;  // devices, gone
    OpenFile m;
    m.pid = pid;
    m.kind = FileKind::regular;
    m.path = path;
    m.key = path.substr(1);
    m.flags = f;
    m.size = static_cast<std::uint64_t>(st.st_size);
    out.push_back(std::move(m));
  }
}

Result<ProcessTree> inspect_tree(pid_t root) {
  ProcessTree t;
  t.root = root;
  pid_t ppid = 0, sid = 0;
  if (root <= 0 || !stat_fields(root, ppid, sid))
    return Error{Errc::not_found, "no process " + std::to_string(root)};
  t.root_is_session_leader = sid == root;
  t.session_outside_namespace = session_outside_namespace(root);
  t.pids = descendants(root);
  std::map<std::uint64_t, InetSocket> inet;
  std::map<std::uint64_t, UnixSocket> peers;
  bool peers_read = false, inet_read = false;
  for (pid_t pid : t.pids) {
    const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
    if (access(dir.c_str(), R_OK) != 0) {
      if (pid == root)
        return errno_error("cannot read the open files of process " + std::to_string(pid));
      continue;  // a child that just exited
    }
    for (const std::string& name : names_in(dir)) {
      OpenFile f;
      f.pid = pid;
      f.fd = std::atoi(name.c_str());
      f.path = read_link(dir + "/" + name);
      if (f.path.empty()) continue;  // closed meanwhile
      read_fdinfo(pid, f.fd, f);
      classify(f, dir + "/" + name);
      if (f.kind == FileKind::other_socket) {
        if (!inet_read) {  // the tree's network namespace: the root's
          inet_read = true;
          for (auto [table, kind] : {std::pair{"tcp", FileKind::tcp_socket},
                                     {"tcp6", FileKind::tcp_socket},
                                     {"udp", FileKind::udp_socket},
                                     {"udp6", FileKind::udp_socket}})
            read_inet(pid, table, kind, inet);
        }
        std::uint64_t ino = inode_of(f.path);
        if (auto s = inet.find(ino); s != inet.end()) {
          f.kind = s->second.kind;
          f.detail = s->second.detail;
          // Anything but LISTEN (10) and CLOSE (7) is a connection CRIU dumps only with
          // --tcp-established or --tcp-close: ESTABLISHED, SYN_SENT, SYN_RECV, FIN_WAIT1/2,
          // CLOSE_WAIT, LAST_ACK, CLOSING.
          int st = s->second.state;
          f.external = f.kind == FileKind::tcp_socket && st != 10 && st != 7;
        } else {
          if (!peers_read) {
            peers = unix_sockets();
            peers_read = true;
          }
          if (auto u = peers.find(ino); u != peers.end()) {
            f.kind = FileKind::unix_socket;
            if (u->second.peer) f.detail = "socket:[" + std::to_string(u->second.peer) + "]";
          }
        }
      }
      t.files.push_back(std::move(f));
    }
  }
  // A pipe is external unless the tree holds both its ends; a terminal unless the tree holds a
  // pty master; a unix socket unless the tree holds its peer.
  std::map<std::string, int> pipe_ends;  // key -> bit 1 read end, bit 2 write end
  std::set<std::string> held;
  bool has_master = false;
  for (const auto& f : t.files) {
    held.insert(f.path);
    if (f.kind == FileKind::pty_master) has_master = true;
    if (f.kind == FileKind::pipe) pipe_ends[f.key] |= (f.flags & O_ACCMODE) == O_RDONLY ? 1 : 2;
  }
  for (auto& f : t.files) {
    if (f.kind == FileKind::pipe) f.external = pipe_ends[f.key] != 3;
    if (f.kind == FileKind::terminal) f.external = !has_master;
    if (f.kind == FileKind::unix_socket && !f.detail.empty()) f.external = !held.count(f.detail);
  }
  for (pid_t pid : t.pids) read_mapped_files(pid, t.mapped);
  return t;
}

Status check_supported(const ProcessTree& tree, const Support& support) {
  std::set<pid_t> cuda;
  for (pid_t p : tree.pids)
    if (maps_libcuda(p).value_or(false)) cuda.insert(p);
  for (const auto& f : tree.files) {
    switch (f.kind) {
      case FileKind::tcp_socket:
        if (f.external && !support.tcp_close)
          return Error{Errc::unsupported,
                       where(f) + " is a TCP connection (" + f.detail +
                           "); gcr cannot move it: close it first, or checkpoint with --tcp-close "
                           "(the restored process finds it closed)"};
        break;
      case FileKind::unix_socket:
        if (f.external) {
          SocketHolder peer = holder_of_socket(inode_of(f.detail));
          if (peer.pid && is_gcr_itself(peer.pid)) break;
          return Error{Errc::unsupported,
                       where(f) + " is a unix socket connected to " +
                           (peer.pid ? peer.name : "a process outside the checkpoint") +
                           ", which is not part of the checkpoint; checkpoint the process tree "
                           "that holds both ends, or close the connection first"};
        }
        break;
      case FileKind::io_uring:
        return Error{Errc::unsupported,
                     where(f) +
                         " is an io_uring instance, which CRIU cannot checkpoint; close it "
                         "before the checkpoint (or run the program without io_uring)"};
      case FileKind::nvidia:
        if (!cuda.count(f.pid))
          return Error{Errc::unsupported,
                       where(f) + " is " + f.path +
                           ", opened directly rather than through the CUDA driver; gcr can only "
                           "checkpoint GPU state it reaches through libcuda"};
        break;
      case FileKind::deleted:
        if (f.size > kGhostLimit)
          return Error{Errc::unsupported,
                       where(f) + " is " + f.path + ", " + std::to_string(f.size >> 20) +
                           " MiB deleted while open; gcr keeps at most " +
                           std::to_string(kGhostLimit >> 20) +
                           " MiB of such a file in the image: close it or give it a name again"};
        break;
      default:
        break;
    }
  }
  return ok();
}

// One line per connection: pid fd kind flags(octal) size pos external key path, tab-separated.
std::string encode_files(const ProcessTree& tree) {
  std::string out;
  std::vector<const OpenFile*> all;
  for (const auto& f : tree.files) all.push_back(&f);
  for (const auto& f : tree.mapped) all.push_back(&f);
  for (const OpenFile* fp : all) {
    const OpenFile& f = *fp;
    bool stdio = f.pid == tree.root && f.fd >= 0 && f.fd <= 2;
    bool wanted = stdio || f.kind == FileKind::regular ||
                  ((f.kind == FileKind::pipe || f.kind == FileKind::terminal) && f.external);
    if (!wanted) continue;
    char flags[16];
    std::snprintf(flags, sizeof flags, "%o", f.flags);
    out += std::to_string(f.pid) + "\t" + std::to_string(f.fd) + "\t" + file_kind_name(f.kind) +
           "\t" + flags + "\t" + std::to_string(f.size) + "\t" + std::to_string(f.pos) + "\t" +
           (f.external ? "1" : "0") + "\t" + escape(f.key) + "\t" + escape(f.path) + "\n";
  }
  return out;
}

Result<std::vector<OpenFile>> decode_files(const std::string& text) {
  std::vector<OpenFile> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    std::vector<std::string> v;
    for (std::size_t start = 0;;) {
      auto tab = line.find('\t', start);
      v.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
      if (tab == std::string::npos) break;
      start = tab + 1;
    }
    if (v.size() != 9)
      return Error{Errc::corrupt_image, "manifest META files: a line has " +
                                            std::to_string(v.size()) + " fields, not 9"};
    OpenFile f;
    f.pid = static_cast<pid_t>(std::atoll(v[0].c_str()));
    f.fd = std::atoi(v[1].c_str());
    f.kind = file_kind_from_name(v[2]);
    f.flags = static_cast<int>(std::strtol(v[3].c_str(), nullptr, 8));
    f.size = std::strtoull(v[4].c_str(), nullptr, 10);
    f.pos = std::strtoull(v[5].c_str(), nullptr, 10);
    f.external = v[6] == "1";
    f.key = unescape(v[7]);
    f.path = unescape(v[8]);
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace gcr::criu
