// gcrd: gcr's daemon. It keeps a warm CUDA context per device, runs the checkpoint and restore
// protocols (checkpoint.h, restore.h) for the gcr command, and holds processes' parked device
// memory while it does. One thread per client; the store takes concurrent writers.
//
//   gcrd [--socket PATH] [--detach]      (normally started by `gcr`, or `gcr daemon`)
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "clone_network.h"
#include "daemon.h"
#include "gcr/criu_creds.h"
#include "gcr/human_output.h"
#include "gcr/private_dir.h"
#include "gcr/settings.h"
#include "gcr/store.h"
#include "gcr/unique_fd.h"
#include "gcrd_client.h"
#include "net_store.h"

namespace fs = std::filesystem;
using namespace gcr;
using namespace gcr::gcrd;

namespace {

// Parking a process hands gcrd one fd per region (and the keeper a copy of each): the default soft
// limit of 1024 would fail a park of a thousand regions.
void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

// --listen ADDR: a TCP socket bound to HOST:PORT (HOST may be 0.0.0.0 or [::]).
Result<UniqueFd> listen_tcp(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos) return Error{Errc::invalid_argument, "--listen takes HOST:PORT"};
  std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  if (host.size() > 1 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res);
      rc != 0)
    return Error{Errc::invalid_argument, "--listen " + address + ": " + gai_strerror(rc)};
  UniqueFd fd(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int rc = fd ? ::bind(fd.get(), res->ai_addr, res->ai_addrlen) : -1;
  freeaddrinfo(res);
  if (rc != 0 || ::listen(fd.get(), 16) != 0) return errno_error("listening on " + address);
  return fd;
}

// Socket activation (packaging/systemd/gcrd.socket): systemd listens already and hands the
// socket over as fd 3 (LISTEN_PID names this process, LISTEN_FDS counts the fds).
UniqueFd socket_from_systemd() {
  const char* pid = std::getenv("LISTEN_PID");
  const char* fds = std::getenv("LISTEN_FDS");
  if (!pid || !fds || std::atoi(pid) != getpid() || std::atoi(fds) < 1) return UniqueFd();
  unsetenv("LISTEN_PID");  // not for CRIU or the keeper
  unsetenv("LISTEN_FDS");
  unsetenv("LISTEN_FDNAMES");
  fcntl(3, F_SETFD, FD_CLOEXEC);
  return UniqueFd(3);
}

// gcrd's command line; false with `exit_code` set when it is not to run.
bool parse_arguments(int argc, char** argv, DaemonOptions& o, bool& detach, fs::path& token_file,
                     MemoryTierOptions& memory, int& exit_code) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--peer-memory" && i + 1 < argc) {
      auto n = parse_size(argv[++i]);
      if (!n || *n < (16u << 20)) {
        std::fprintf(stderr, "gcrd: --peer-memory %s: %s\n", argv[i],
                     n ? "at least 16M" : n.error().message.c_str());
        exit_code = 2;
        return false;
      }
      memory.budget = *n;
    } else if (a == "--peer-copy-mib-per-s" && i + 1 < argc) {
      memory.mib_per_s = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--peer-memory-dir" && i + 1 < argc) {
      memory.root = fs::absolute(argv[++i]);
    } else if (a == "--listen" && i + 1 < argc) {
      o.listen_address = argv[++i];
    } else if (a == "--token-file" && i + 1 < argc) {
      token_file = argv[++i];
    } else if (a == "--store" && i + 1 < argc) {
      o.served_store = fs::absolute(argv[++i]);
    } else if (a == "--containers" && i + 1 < argc) {
      o.containers.bundles = fs::absolute(argv[++i]);
    } else if (a == "--runtime" && i + 1 < argc) {
      o.containers.runtime = argv[++i];
    } else if (a == "--allow-uids" && i + 1 < argc) {
      auto uids = criu::parse_uid_list(argv[++i]);
      if (!uids) {
        std::fprintf(stderr, "gcrd: --allow-uids: %s\n", uids.error().message.c_str());
        exit_code = 2;
        return false;
      }
      o.peer_uids = std::move(uids).value();
    } else if (a == "--socket" && i + 1 < argc) {
      o.socket_path = argv[++i];
    } else if (a == "--detach") {
      detach = true;
    } else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: gcrd [--socket PATH] [--detach] [--listen HOST:PORT --token-file FILE [--store "
          "DIR] [--allow-uids LIST] [--containers DIR [--runtime RUNC]] [--peer-memory SIZE "
          "[--peer-memory-dir DIR] [--peer-copy-mib-per-s N]]]\n  gcr's daemon; normally "
          "started by gcr on "
          "demand, or by systemd (gcrd.socket, which hands it the socket). SIGTERM stops it once "
          "the requests in progress are answered.\n  --listen: also "
          "serve other hosts over TCP (the destination of gcr migrate), authenticated by the "
          "token in FILE (0600), writing into and restoring from the store DIR (default: "
          "'served' beside gcrd's default store, never that store itself). FILE holds one token "
          "every host shares, or a line 'peer NAME SECRET [allow-uids=LIST]' per host "
          "(docs/security.md).\n  --allow-uids: the "
          "users (uids and ranges: 0,1000-1999) a process restored for another host may run as, "
          "where its peer line names none; by default none (a peer's images say who their "
          "process is).\n"
          "  --containers: also "
          "restore containers migrated here (gcr migrate "
          "--container), container NAME only from the bundle DIR/NAME, with RUNC (default: runc "
          "in PATH); a podman container only as DIR/NAME/podman.conf allows (image = REF, mount "
          "= PATH...), with podman (--runtime when it is a podman, else podman in PATH).\n  "
          "--peer-memory: keep up to SIZE (512M, 4G) of other hosts' job "
          "checkpoints in memory (gcr checkpoint --job ... --peer-copies), on the memory file "
          "system DIR (default /dev/shm/gcr-peer-memory-PORT), each copy paced to N MiB/s "
          "(default: unpaced); never taking the last 10%% of the host's memory "
          "(docs/jobs.md).\n");
      exit_code = 0;
      return false;
    } else {
      std::fprintf(stderr, "gcrd: unknown argument '%s' (see --help)\n", a.c_str());
      exit_code = 2;
      return false;
    }
  }
  return true;
}

// The unix socket gcrd listens on; its directory, and the log in it, are gcrd's alone (Note
// [Private directories]): one another user made first is refused, never adopted.
Result<UniqueFd> listen_unix(const fs::path& socket_path, UniqueFd& socket_dir) {
  GCR_TRY_ASSIGN(
      socket_dir,
      io::open_private_dir(socket_path.parent_path(), true).context("the directory of its socket"));
  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.string().size() >= sizeof addr.sun_path)
    return Error{Errc::invalid_argument, "socket path too long: " + socket_path.string()};
  std::strcpy(addr.sun_path, socket_path.c_str());
  // A socket file left by a gcrd that died: nothing answers on it, so take it over.
  if (access(socket_path.c_str(), F_OK) == 0) {
    UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (::connect(probe.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0)
      return Error{Errc::busy, "another gcrd already listens on " + socket_path.string()};
    unlink(socket_path.c_str());
  }
  mode_t old = umask(0077);
  if (bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(listener.get(), 64) != 0) {
    umask(old);
    return errno_error("cannot listen on " + socket_path.string());
  }
  umask(old);
  return listener;
}

// --detach: the parent returns once the socket listens; the child logs to gcrd.log.
bool detach_into_log(const UniqueFd& socket_dir, const fs::path& socket_path) {
  pid_t child = fork();
  if (child < 0) return false;
  if (child > 0) _exit(0);  // the socket listens already: the starter may connect
  auto lfd = io::open_private_file(socket_dir.get(), "gcrd.log", O_WRONLY | O_CREAT | O_APPEND);
  if (lfd) {
    dup2(lfd->get(), 2);
  } else {
    std::fprintf(stderr, "gcrd: not logging to %s/gcrd.log: %s\n",
                 socket_path.parent_path().c_str(), lfd.error().message.c_str());
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  DaemonOptions o;
  bool detach = false;
  fs::path token_file;
  MemoryTierOptions memory;
  if (int rc = 0; !parse_arguments(argc, argv, o, detach, token_file, memory, rc)) return rc;
  // gcr starts gcrd with --socket and --detach: then the settings' warnings go to gcrd.log, below.
  if (o.socket_path.empty()) o.socket_path = default_socket_path();
  std::error_code ec;
  o.self_dir = fs::canonical("/proc/self/exe", ec).parent_path();
  o.containers.socket = fs::absolute(o.socket_path);
  signal(SIGPIPE, SIG_IGN);
  raise_fd_limit();
  UniqueFd network;
  if (!o.listen_address.empty()) {
    if (token_file.empty()) {
      std::fprintf(stderr, "gcrd: --listen needs --token-file (docs/security.md)\n");
      return 2;
    }
    auto t = read_peer_keys(token_file);
    auto l = t ? listen_tcp(o.listen_address) : Result<UniqueFd>(t.error());
    if (!l) {
      std::fprintf(stderr, "gcrd: %s\n", l.error().message.c_str());
      return 1;
    }
    o.net_keys = std::move(t).value();
    network = std::move(l).value();
    // Other hosts get a store of their own, never this gcrd's users' checkpoints.
    if (o.served_store.empty())
      o.served_store = store::Store::default_root().parent_path() / "served";
  }
  if (memory.budget) {  // Note [Checkpoints in peers' memory] (memory_tier.h)
    if (o.listen_address.empty()) {
      std::fprintf(stderr,
                   "gcrd: --peer-memory keeps other hosts' checkpoints: it needs --listen\n");
      return 2;
    }
    if (memory.root.empty())
      memory.root =
          "/dev/shm/gcr-peer-memory-" + o.listen_address.substr(o.listen_address.rfind(':') + 1);
    auto tier = MemoryTier::open(memory);
    if (!tier) {
      std::fprintf(stderr, "gcrd: %s\n", tier.error().message.c_str());
      return 1;
    }
    o.memory_tier = std::move(tier).value();
  }
  UniqueFd listener = socket_from_systemd(), socket_dir;
  if (listener) {
    o.owns_socket = false;
  } else {
    auto l = listen_unix(o.socket_path, socket_dir);
    if (!l) {
      std::fprintf(stderr, "gcrd: %s\n", l.error().message.c_str());
      return 1;
    }
    listener = std::move(l).value();
    if (detach && !detach_into_log(socket_dir, o.socket_path)) return 1;
  }
  (void)gcr::settings();  // parsed now, its warnings at the log's start (gcr/settings.h)
  Daemon daemon(std::move(o));
  daemon.stop_on_signals();
  // Note [Checkpoints every period] (periodic.h): schedules kept across a restart, beside the
  // socket.
  daemon.periodic().persist_in(daemon.options().socket_path.parent_path() / "schedules",
                               daemon.options().self_dir, &daemon.work(),
                               [&daemon](const std::string& line) { daemon.log(line); });
  if (geteuid() == 0) remove_stale_clone_names();  // Note [A clone's network] (clone_network.h)
  return daemon.run(std::move(listener), std::move(network));
}
