// gcrd as an object: what it listens on, the requests it serves (a table of verbs, each with its
// typed fields: gcrd_requests.h), the work it has in progress (work_registry.h), and how it stops.
//
// Note [gcrd stops cleanly]
// On SIGTERM or SIGINT (systemd stopping gcrd.service, `kill`) gcrd stops accepting: a new
// connection is refused (nothing listens), and every request already read is served to its end
// and answered, for up to `drain_limit`. A checkpoint or restore still running then is left as it
// is: gcrd exits, and each keeper does what it does when gcrd dies (Note [Parked memory outlives
// gcrd] in keeper.h): a parked process gets its memory back, a restored one not yet given its
// memory is ended. The socket file is removed.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "container_host.h"
#include "gcr/result.h"
#include "gcr/unique_fd.h"
#include "gcrd_requests.h"
#include "log_budget.h"
#include "memory_tier.h"
#include "peer_keys.h"
#include "periodic.h"
#include "work_registry.h"

namespace gcr::gcrd {

struct DaemonOptions {
  std::filesystem::path socket_path;  // where `listener` is bound
  bool owns_socket = true;         // removed when gcrd stops (not systemd's: gcrd.socket keeps it)
  std::filesystem::path self_dir;  // gcrd's own directory: gcr-keeper, CRIU's plugin
  ContainerHost containers;        // --containers, --runtime
  std::string listen_address;      // --listen (for the log)
  PeerKeys net_keys;  // --token-file's keys, with --listen (Note [Per-peer keys], peer_keys.h)
  std::filesystem::path served_store;  // the store served to other hosts, with --listen
  std::set<uid_t> peer_uids;  // --allow-uids: Note [Who a peer may run] in gcr/criu_creds.h
  bool warm_up = true;  // warm the GPU and CRIU's probe at start (a unit test leaves them cold)
  std::chrono::seconds drain_limit{60};  // Note [gcrd stops cleanly]
  // --peer-memory: other hosts' job parts kept here (Note [Checkpoints in peers' memory] in
  // memory_tier.h); null without it.
  std::shared_ptr<MemoryTier> memory_tier;
};

// Note [Before a peer is authenticated]
// A network peer holds nothing of gcrd's until its first line proves it knows the token: the line
// must arrive whole within 10 s (not 10 s per byte), and connections still in their first line
// have a pool of their own, 16 in all and 4 from any one address, apart from the 64 slots of
// authenticated ones. A peer dripping bytes on many connections fills its own 4 places and no
// more; everyone else is still served. Connections past those limits are closed unread, and not
// logged one by one; refused handshakes are logged 20 a minute at most (log_budget.h).

// One request, as its handler sees it.
struct Request {
  std::string verb;
  Fields fields;
  std::vector<UniqueFd> files;  // sent with it (SCM_RIGHTS)
  uid_t client_uid = 0;
  int client_fd = -1;  // for replies beyond the last (the plugin, a migration's hold)
  std::function<void(const std::string&)> progress;
  bool from_network = false;
  // From the network: the users its processes may be (the peer key's allow-uids, else
  // --allow-uids; Note [Who a peer may run]).
  std::set<uid_t> peer_uids;
  const NetKey* net_key = nullptr;  // from the network: the key the peer proved
};

// What a network peer reaches (Note [Per-peer keys] in peer_keys.h): its store (the served store,
// or with a key of its own `<served>/peers/<name>`, so that peers never see each other's
// checkpoints) and the users its processes may be.
struct PeerScope {
  std::filesystem::path store;
  std::set<uid_t> uids;
  const NetKey* key = nullptr;
};

class Daemon {
 public:
  explicit Daemon(DaemonOptions options);
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;
  ~Daemon();

  // Serves `listener` (and `network`, when given) until stop(); returns 0 once every request in
  // flight was answered (or drain_limit passed).
  int run(UniqueFd listener, UniqueFd network = UniqueFd());
  // Asks run() to return (async-signal-safe: a write to a pipe).
  void stop() noexcept;
  // Makes SIGTERM and SIGINT call stop() on this daemon.
  void stop_on_signals();

  // Dispatches one request to its verb's handler.
  Result<Fields> serve(Request& request);
  WorkRegistry& work() { return work_; }
  Periodic& periodic() { return periodic_; }
  const DaemonOptions& options() const { return options_; }
  void log(const std::string& line);

 private:
  void accept_loop(int listener, bool network);
  void handle_client(UniqueFd fd);
  void handle_network_client(UniqueFd fd, std::string address, std::string peer) noexcept;
  void handle_request(const UniqueFd& fd, uid_t client_uid, bool from_network, PeerScope peer = {});
  PeerScope scope_of(const NetKey& key) const;
  // In-flight requests, counted so that stop() can wait for them.
  class InFlight;
  void begin_request();
  void end_request();

  DaemonOptions options_;
  WorkRegistry work_;
  Periodic periodic_;  // after work_, which its checkpoints report to
  std::mutex log_mu_;
  UniqueFd stop_read_, stop_write_;
  std::mutex mu_;
  std::condition_variable idle_;
  int in_flight_ = 0;
  std::atomic<int> network_clients_{0};
  // Note [Before a peer is authenticated]: connections still in their first line, in all and by
  // address.
  std::mutex handshake_mu_;
  int handshakes_ = 0;
  std::map<std::string, int> handshakes_from_;
  LogBudget refusals_log_{20};  // lines a minute on refused peers
  bool begin_handshake(const std::string& address);
  void end_handshake(const std::string& address);
};

}  // namespace gcr::gcrd
