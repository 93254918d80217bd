// gcrd's connections and its life (daemon.h); the requests themselves are gcrd_serve.cpp's.
#include "daemon.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>

#include "device.h"
#include "gcr/criu.h"
#include "gcrd_protocol.h"
#include "net_store.h"
#include "pause_point.h"

namespace gcr::gcrd {
namespace fs = std::filesystem;

namespace {

void send_error(int fd, const Error& e) {
  send_line(fd,
            "error " + std::to_string(static_cast<int>(e.code)) + " " + encode_value(e.message));
}

// The request line, and the files the client sent with it (SCM_RIGHTS: a restore's inherited
// stdio and logs, named by the request's inherit.N fields).
std::string read_request(int fd, std::vector<UniqueFd>& files) {
  std::string line;
  char c;
  constexpr std::size_t kMaxFiles = 64;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFiles)];
  while (line.size() < 65536) {
    iovec iov{&c, 1};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    for (cmsghdr* h = CMSG_FIRSTHDR(&msg); h; h = CMSG_NXTHDR(&msg, h))
      if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS) {
        std::size_t count = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t i = 0; i < count; ++i) {
          int received;
          std::memcpy(&received, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
          files.emplace_back(received);
        }
      }
    if (n <= 0 || c == '\n') break;
    line += c;
  }
  return line;
}

Daemon* g_signalled = nullptr;  // the daemon SIGTERM stops (stop_on_signals)

constexpr int kMaxNetworkClients = 64;
constexpr int kMaxHandshakes = 16;  // Note [Before a peer is authenticated]
constexpr int kMaxHandshakesPerAddress = 4;

}  // namespace

class Daemon::InFlight {
 public:
  explicit InFlight(Daemon& d) : d_(d) { d_.begin_request(); }
  ~InFlight() { d_.end_request(); }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  Daemon& d_;
};

Daemon::Daemon(DaemonOptions options) : options_(std::move(options)) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0) {
    stop_read_.reset(p[0]);
    stop_write_.reset(p[1]);
  }
}

Daemon::~Daemon() {
  if (g_signalled == this) g_signalled = nullptr;
}

void Daemon::log(const std::string& line) {
  std::lock_guard lock(log_mu_);
  std::fprintf(stderr, "gcrd: %s\n", line.c_str());
  std::fflush(stderr);
}

void Daemon::stop() noexcept {
  char b = 's';
  (void)!::write(stop_write_.get(), &b, 1);
}

void Daemon::stop_on_signals() {
  g_signalled = this;
  struct sigaction sa {};
  sa.sa_handler = [](int) {
    if (g_signalled) g_signalled->stop();
  };
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

void Daemon::begin_request() {
  std::lock_guard lock(mu_);
  ++in_flight_;
}

void Daemon::end_request() {
  std::lock_guard lock(mu_);
  if (--in_flight_ == 0) idle_.notify_all();
}

int Daemon::run(UniqueFd listener, UniqueFd network) {
  if (options_.warm_up) {
    // Warm the GPU now, off any request's path.
    if (auto gpu = Gpu::get(); !gpu) log("GPU unavailable: " + gpu.error().message);
    // And ask CRIU whether it can restore host memory lazily (`criu check --feature uffd-noncoop`,
    // a whole CRIU start: 40-80 ms here), which every restore needs to know before it starts
    // CRIU; the answer is kept for gcrd's life, so only the first restore would wait for it.
    std::thread([dir = options_.self_dir] {
      if (auto tools = criu::find_tools(dir)) (void)criu::lazy_pages_available(*tools);
    }).detach();
  }
  std::thread net;
  if (network) {
    log("listening on " + options_.listen_address + " (TCP) for the store " +
        options_.served_store.string());
    net = std::thread([this, fd = network.get()] { accept_loop(fd, true); });
  }
  log("listening on " + (options_.owns_socket ? options_.socket_path.string()
                                              : "the socket systemd passed (gcrd.socket)"));
  accept_loop(listener.get(), false);
  // Note [gcrd stops cleanly]: nothing new is accepted; what was read is answered.
  listener.reset();
  if (net.joinable()) net.join();
  network.reset();
  std::error_code ec;
  if (options_.owns_socket) fs::remove(options_.socket_path, ec);
  std::unique_lock lock(mu_);
  if (in_flight_ > 0) {
    log("stopping: waiting for " + std::to_string(in_flight_) + " request(s) in progress");
    if (!idle_.wait_for(lock, options_.drain_limit, [&] { return in_flight_ == 0; }))
      log("stopping with " + std::to_string(in_flight_) +
          " request(s) still in progress: their keepers take over");
  }
  log("stopped");
  return 0;
}

// Accepts until stop(): each connection on a thread of its own.
void Daemon::accept_loop(int listener, bool network) {
  for (;;) {
    pollfd p[2] = {{listener, POLLIN, 0}, {stop_read_.get(), POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      log(std::string("poll: ") + std::strerror(errno));
      return;
    }
    if (p[1].revents) return;  // stop(): the byte stays, for the other loop
    sockaddr_storage from{};
    socklen_t len = sizeof from;
    int c = accept4(listener, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno != EINTR && errno != EAGAIN) {
        log(std::string(network ? "accept (network): " : "accept: ") + std::strerror(errno));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // EMFILE: do not spin
      }
      continue;
    }
    UniqueFd fd(c);
    if (!network) {
      try {
        std::thread([this, fd = std::move(fd)]() mutable {
          handle_client(std::move(fd));
        }).detach();
      } catch (const std::exception& e) {  // no thread to be had: this connection is refused
        log(std::string("a connection refused: ") + e.what());
      }
      continue;
    }
    if (network_clients_.load() >= kMaxNetworkClients) continue;  // closed: refused
    char host[NI_MAXHOST] = "?", port[NI_MAXSERV] = "?";
    getnameinfo(reinterpret_cast<sockaddr*>(&from), len, host, sizeof host, port, sizeof port,
                NI_NUMERICHOST | NI_NUMERICSERV);
    if (!begin_handshake(host)) continue;  // closed unread: Note [Before a peer is authenticated]
    int one = 1;
    setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    watch_peer(fd.get());  // Note [A peer that stops answering]
    try {
      ++network_clients_;
      std::thread(
          [this](UniqueFd fd, std::string address, std::string peer) {
            handle_network_client(std::move(fd), address, std::move(peer));
            --network_clients_;
          },
          std::move(fd), std::string(host), std::string(host) + ":" + port)
          .detach();
    } catch (const std::exception& e) {
      --network_clients_;
      end_handshake(host);
      log(std::string("a network connection refused: ") + e.what());
    }
  }
}

void Daemon::handle_client(UniqueFd fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
      (cred.uid != 0 && cred.uid != geteuid())) {
    send_error(fd.get(), Error{Errc::permission_denied, "gcrd serves root and its own user only"});
    return;
  }
  handle_request(fd, cred.uid, false);
}

bool Daemon::begin_handshake(const std::string& address) {
  std::lock_guard lock(handshake_mu_);
  int& mine = handshakes_from_[address];
  if (handshakes_ >= kMaxHandshakes || mine >= kMaxHandshakesPerAddress) {
    if (mine == 0) handshakes_from_.erase(address);
    return false;
  }
  ++handshakes_;
  ++mine;
  return true;
}

void Daemon::end_handshake(const std::string& address) {
  std::lock_guard lock(handshake_mu_);
  --handshakes_;
  if (--handshakes_from_[address] <= 0) handshakes_from_.erase(address);
}

// A connection from another host (net_store.h): the token first, then the store or a request.
void Daemon::handle_network_client(UniqueFd fd, std::string address, std::string peer) noexcept
    try {
  // The whole handshake within 10 s (Note [Before a peer is authenticated]); its place in the
  // handshakes' pool is given back however this ends.
  struct Handshake {
    Daemon& d;
    const std::string& address;
    bool over = false;
    void end() {
      if (!over) d.end_handshake(address);
      over = true;
    }
    ~Handshake() { end(); }
  } handshake{*this, address};
  auto channel = net_accept(std::move(fd), options_.net_keys, std::chrono::seconds(10));
  handshake.end();
  if (!channel) {
    if (auto line = refusals_log_.admit("refused a connection from " + peer + ": " +
                                        channel.error().message))
      log(*line);
    return;
  }
  fd = std::move(channel->fd);  // the plain end of the encrypted channel (net_tls.h)
  const NetKey& key = *channel->peer;
  if (!key.name.empty()) peer += " (key " + key.name + ")";
  PeerScope scope = scope_of(key);
  if (channel->verb == "request") return handle_request(fd, geteuid(), true, std::move(scope));
  store::BackendOptions o;
  o.create = true;
  if (channel->verb == "memory") {  // Note [Checkpoints in peers' memory] (memory_tier.h)
    if (!options_.memory_tier || !key.name.empty()) {
      send_error(fd.get(),
                 Error{Errc::not_found,
                       options_.memory_tier
                           ? "peer memory is served to hosts of the shared token only"
                           : "this gcrd keeps no peer memory (gcr daemon --peer-memory SIZE)"});
      return;
    }
    scope.store = options_.memory_tier->options().root / "store";
    o.create = false;
  }
  auto backend = store::open_dir_backend(scope.store, o);
  if (!backend) {
    send_error(fd.get(), backend.error());
    return;
  }
  InFlight counted(*this);
  log("serving the store " + scope.store.string() + " to " + peer);
  if (channel->verb == "memory") {  // read only: only this gcrd fills its memory tier
    ReadOnlyBackend read_only(**backend);
    serve_net_store(fd.get(), read_only);
    return;
  }
  serve_net_store(fd.get(), **backend);
} catch (const std::exception& e) {  // bad_alloc on a huge payload, say: this connection only
  log("a connection from " + peer + " failed: " + e.what());
}

PeerScope Daemon::scope_of(const NetKey& key) const {
  PeerScope scope;
  scope.store =
      key.name.empty() ? options_.served_store : options_.served_store / "peers" / key.name;
  scope.uids = key.allow_uids.value_or(options_.peer_uids);
  scope.key = &key;
  return scope;
}

// One gcrd/1 request on fd from a client of uid `client_uid`. From the network (Note [Network
// trust] in net_store.h): ping, stage, restore and restore_container only, on the peer's store
// (PeerScope) whatever the request says.
void Daemon::handle_request(const UniqueFd& fd, uid_t client_uid, bool from_network,
                            PeerScope peer) {
  Request r;
  r.client_uid = client_uid;
  r.client_fd = fd.get();
  r.from_network = from_network;
  r.peer_uids = std::move(peer.uids);
  r.net_key = peer.key;
  std::string line = read_request(fd.get(), r.files);
  InFlight counted(*this);  // Note [gcrd stops cleanly]: what was read is answered
  auto sp1 = line.find(' ');
  std::string proto = line.substr(0, sp1);
  if (proto != kProtocol) {
    send_error(fd.get(), Error{Errc::unsupported, "gcrd speaks " + std::string(kProtocol) +
                                                      ", the client sent '" + proto + "'"});
    return;
  }
  auto sp2 = sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
  r.verb = line.substr(sp1 + 1, sp2 == std::string::npos ? std::string::npos : sp2 - sp1 - 1);
  std::string rest = sp2 != std::string::npos ? line.substr(sp2 + 1) : std::string();
  int cfd = fd.get();
  r.progress = [cfd](const std::string& text) { send_line(cfd, "progress " + encode_value(text)); };
  r.fields = decode_fields(rest);
  if (from_network) {
    if (r.verb != "ping" && r.verb != "restore" && r.verb != "stage" &&
        r.verb != "restore_container" && r.verb != "job_part" && r.verb != "tier") {
      send_error(cfd, Error{Errc::permission_denied,
                            "over the network gcrd serves ping, stage, restore, "
                            "restore_container, job_part and tier only"});
      return;
    }
    r.fields["store"] = peer.store.string();
  }
  // A key a client hands gcrd for other hosts (Note [A job across hosts]) is never logged.
  Fields shown = r.fields;
  if (shown.count("net_key")) shown["net_key"] = "(hidden)";
  log(std::string("request from ") +
      (from_network ? "the network" : "uid " + std::to_string(client_uid)) + ": " + r.verb + " " +
      encode_fields(shown));
  const bool quick = r.verb == "ping" || r.verb == "stage" || r.verb == "work";
  if (!quick) pause_point("request");
  auto result = serve(r);
  if (!quick) pause_point("reply");
  if (result) {
    send_line(cfd, "ok " + encode_fields(*result));
  } else {
    log(r.verb + " failed: " + result.error().message);
    send_error(cfd, result.error());
  }
}

}  // namespace gcr::gcrd
