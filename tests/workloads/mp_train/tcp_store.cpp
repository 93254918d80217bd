#include "tcp_store.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "socket.h"

namespace mp {

namespace {

constexpr std::uint32_t kMaxField = 1u << 20;

void put_u32(std::string* out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint32_t get_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<std::uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

std::string encode_request(char op, const std::string& key, const std::string& value) {
  std::string out(1, op);
  put_u32(&out, static_cast<std::uint32_t>(key.size()));
  out += key;
  put_u32(&out, static_cast<std::uint32_t>(value.size()));
  out += value;
  return out;
}

std::string encode_reply(const std::string& value) {
  std::string out(1, '\0');
  put_u32(&out, static_cast<std::uint32_t>(value.size()));
  return out + value;
}

std::int64_t decimal(const std::string& text) {
  return text.empty() ? 0 : std::strtoll(text.c_str(), nullptr, 10);
}

struct Request {
  char op;
  std::string key, value;
};

// Takes the first whole request off the front of `in`. Returns 0 if it is not all there yet, 1 if
// one was taken, -1 if `in` does not start with a request.
int take_request(std::string* in, Request* out) {
  if (in->empty()) return 0;
  const char op = (*in)[0];
  if (op != 'S' && op != 'G' && op != 'A' && op != 'W') return -1;
  std::size_t at = 1;
  std::string fields[2];
  for (std::string& field : fields) {
    if (in->size() < at + 4) return 0;
    std::uint32_t n = get_u32(in->data() + at);
    if (n > kMaxField) return -1;
    if (in->size() < at + 4 + n) return 0;
    field = in->substr(at + 4, n);
    at += 4 + n;
  }
  *out = {op, std::move(fields[0]), std::move(fields[1])};
  in->erase(0, at);
  return 1;
}

struct Client {
  UniqueFd fd;
  std::string in;
  bool dead = false;
};

struct Waiter {
  Client* client;
  char op;
  std::string key;
};

// The map and its waiters: what the server thread does with each request.
class Table {
 public:
  void handle(Client* c, const Request& r) {
    if (r.op == 'S' || r.op == 'A') {
      std::string& v = map_[r.key];
      v = r.op == 'S' ? r.value : std::to_string(decimal(v) + decimal(r.value));
      reply(c, r.op == 'A' ? v : std::string());
      wake(r.key);
    } else if (auto it = map_.find(r.key); it != map_.end()) {
      reply(c, r.op == 'G' ? it->second : std::string());
    } else {
      waiters_.push_back({c, r.op, r.key});
    }
  }
  void forget(const Client* c) {
    std::erase_if(waiters_, [c](const Waiter& w) { return w.client == c; });
  }

 private:
  static void reply(Client* c, const std::string& value) {
    std::string bytes = encode_reply(value);
    if (!send_all(c->fd.get(), bytes.data(), bytes.size())) c->dead = true;
  }
  void wake(const std::string& key) {
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->key != key) {
        ++it;
        continue;
      }
      reply(it->client, it->op == 'G' ? map_[key] : std::string());
      it = waiters_.erase(it);
    }
  }

  std::map<std::string, std::string> map_;
  std::vector<Waiter> waiters_;
};

// Reads what `c` sent and handles every whole request in it; false when the client is gone.
bool read_client(Client* c, Table* table) {
  char buf[4096];
  ssize_t n = ::recv(c->fd.get(), buf, sizeof buf, 0);
  if (n < 0 && errno == EINTR) return true;
  if (n <= 0) return false;
  c->in.append(buf, static_cast<std::size_t>(n));
  Request r;
  int got;
  while ((got = take_request(&c->in, &r)) > 0) table->handle(c, r);
  return got == 0 && !c->dead;
}

[[noreturn]] void store_fail(int rank, const HostPort& at, const std::string& what) {
  std::fflush(stdout);
  std::fprintf(stderr, "mp_train: rank %d: the store at %s %s\n", rank, at.text().c_str(),
               what.c_str());
  std::exit(2);
}

}  // namespace

StoreServer::StoreServer(const HostPort& at) {
  std::string error;
  listener_ = tcp_listen(at, 64, &error);
  if (!listener_) {
    std::fprintf(stderr, "mp_train: rank 0: cannot serve the store: %s\n", error.c_str());
    std::exit(2);
  }
  wake_.reset(::eventfd(0, EFD_CLOEXEC));
  if (!wake_) fail_errno("eventfd");
  thread_ = std::thread([this] { serve(); });
}

StoreServer::~StoreServer() {
  if (thread_.joinable()) finish(0);
}

void StoreServer::finish(int timeout_ms) {
  finish_timeout_ms_.store(timeout_ms);
  std::uint64_t one = 1;
  if (::write(wake_.get(), &one, sizeof one) != sizeof one) fail_errno("eventfd write");
  thread_.join();
}

void StoreServer::serve() {
  Table table;
  std::vector<std::unique_ptr<Client>> clients;
  bool finishing = false;
  std::chrono::steady_clock::time_point deadline;
  for (;;) {
    int timeout = -1;
    if (finishing) {
      if (clients.empty()) return;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        std::fprintf(stderr,
                     "mp_train: rank 0: %zu ranks still connected to the store; closing it\n",
                     clients.size());
        return;
      }
      timeout = static_cast<int>(left.count());
    }
    std::vector<pollfd> fds{{wake_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}};
    for (const auto& c : clients) fds.push_back({c->fd.get(), POLLIN, 0});
    if (::poll(fds.data(), fds.size(), timeout) < 0) {
      if (errno == EINTR) continue;
      fail_errno("poll (store)");
    }
    if (fds[0].revents) {
      std::uint64_t n;
      if (::read(wake_.get(), &n, sizeof n) == sizeof n) {
        finishing = true;
        deadline =
            std::chrono::steady_clock::now() + std::chrono::milliseconds(finish_timeout_ms_.load());
      }
    }
    if (fds[1].revents) {
      UniqueFd fd = tcp_accept(listener_, 0);
      if (fd) {
        clients.push_back(std::make_unique<Client>());
        clients.back()->fd = std::move(fd);
      }
    }
    for (std::size_t i = 2; i < fds.size(); ++i) {
      Client* c = clients[i - 2].get();
      if (fds[i].revents && !read_client(c, &table)) c->dead = true;
    }
    for (const auto& c : clients)
      if (c->dead) table.forget(c.get());
    std::erase_if(clients, [](const auto& c) { return c->dead; });
  }
}

StoreClient::StoreClient(const HostPort& at, int rank, int timeout_ms, const std::string& from)
    : at_(at), rank_(rank) {
  std::string error;
  fd_ = tcp_connect(at, timeout_ms, &error, from);
  if (!fd_) {
    store_fail(rank, at,
               "is unreachable: " + error + " (tried for " + std::to_string(timeout_ms / 1000) +
                   " s; rank 0 serves it)");
  }
}

std::string StoreClient::call(char op, const std::string& key, const std::string& value,
                              int timeout_ms, const std::string& waiting_for) {
  std::string request = encode_request(op, key, value);
  if (!send_all(fd_.get(), request.data(), request.size()))
    store_fail(rank_, at_, std::string("refused a request: ") + std::strerror(errno));
  // Without a time limit the thread blocks in recv() itself (a barrier's wait, for instance).
  if (timeout_ms >= 0 && !wait_readable(fd_.get(), timeout_ms)) {
    store_fail(rank_, at_,
               "has no '" + key + "' after " + std::to_string(timeout_ms / 1000) + " s (" +
                   waiting_for + ")");
  }
  char head[5];
  std::string reply;
  bool ok = recv_all(fd_.get(), head, sizeof head);
  if (ok && head[0] != 0) store_fail(rank_, at_, "answered with status " + std::to_string(head[0]));
  if (ok) {
    reply.resize(get_u32(head + 1));
    ok = recv_all(fd_.get(), reply.data(), reply.size());
  }
  if (!ok) {
    store_fail(rank_, at_,
               errno ? std::string("broke the connection: ") + std::strerror(errno)
                     : std::string("closed the connection (is rank 0 gone?)"));
  }
  return reply;
}

void StoreClient::set(const std::string& key, const std::string& value) {
  call('S', key, value, -1, "");
}

std::string StoreClient::get(const std::string& key, int timeout_ms,
                             const std::string& waiting_for) {
  return call('G', key, "", timeout_ms, waiting_for);
}

std::int64_t StoreClient::add(const std::string& key, std::int64_t delta) {
  return decimal(call('A', key, std::to_string(delta), -1, ""));
}

void StoreClient::wait(const std::string& key) {
  call('W', key, "", -1, "");
}

void StoreClient::barrier(const std::string& key, int ranks) {
  if (add(key, 1) == ranks) set(key + "/done", "");
  wait(key + "/done");
}

}  // namespace mp
