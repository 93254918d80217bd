// net_store.h: gcrd's TCP protocol, both ends.
#include "net_store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <vector>

#include "gcr/settings.h"
#include "gcrd_client.h"
#include "gcrd_protocol.h"
#include "net_handshake.h"

namespace gcr::gcrd {
namespace {

constexpr std::uint64_t kMaxPayload = 1ull << 30;  // a pack: pack_target_bytes and a chunk
constexpr std::size_t kMaxLine = 64 * 1024;

Error unreachable(Error e) {
  e.code = Errc::unreachable;
  return e;
}

template <typename T>
Status status_of(Result<T> r) {
  if (!r) return std::move(r).error();
  return ok();
}

// A buffered connection: lines and exact byte counts.
class Conn {
 public:
  explicit Conn(int fd) : fd_(fd) {}

  Result<std::string> line() {
    std::string out;
    for (;;) {
      if (pos_ == len_) GCR_TRY(fill());
      char* nl = static_cast<char*>(std::memchr(buf_ + pos_, '\n', len_ - pos_));
      std::size_t take = nl ? static_cast<std::size_t>(nl - (buf_ + pos_)) : len_ - pos_;
      out.append(buf_ + pos_, take);
      pos_ += take;
      if (nl) {
        ++pos_;
        return out;
      }
      if (out.size() > kMaxLine) return Error{Errc::protocol, "a line longer than 64 KiB"};
    }
  }

  Status bytes(std::byte* out, std::size_t n) {
    while (n > 0) {
      if (pos_ == len_) {
        if (n >= sizeof buf_) {  // large reads go straight to the caller's buffer
          ssize_t r = ::recv(fd_, out, n, 0);
          if (r < 0 && errno == EINTR) continue;
          if (r <= 0) return eof_or(r);
          out += r;
          n -= static_cast<std::size_t>(r);
          continue;
        }
        GCR_TRY(fill());
      }
      std::size_t take = std::min(n, len_ - pos_);
      std::memcpy(out, buf_ + pos_, take);
      pos_ += take;
      out += take;
      n -= take;
    }
    return ok();
  }

  Status send(const std::string& head, std::span<const std::byte> payload = {}) {
    GCR_TRY(send_all(head.data(), head.size()));
    return send_all(payload.data(), payload.size());
  }

 private:
  Status fill() {
    for (;;) {
      ssize_t r = ::recv(fd_, buf_, sizeof buf_, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return eof_or(r);
      pos_ = 0;
      len_ = static_cast<std::size_t>(r);
      return ok();
    }
  }
  static Status eof_or(ssize_t r) {
    if (r == 0) return Error{Errc::unreachable, "the connection closed"};
    return unreachable(errno_error("reading from the network", errno));
  }
  Status send_all(const void* p, std::size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t w = ::send(fd_, c, n, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return unreachable(errno_error("writing to the network", errno));
      c += w;
      n -= static_cast<std::size_t>(w);
    }
    return ok();
  }

  int fd_;
  char buf_[64 * 1024];
  std::size_t pos_ = 0, len_ = 0;
};

std::string head(const std::string& word, const std::map<std::string, std::string>& fields) {
  return word + (fields.empty() ? "" : " " + encode_fields(fields)) + "\n";
}

std::uint64_t field_u64(const std::map<std::string, std::string>& f, const char* k) {
  auto it = f.find(k);
  return it == f.end() ? 0 : std::strtoull(it->second.c_str(), nullptr, 10);
}

// The store's own names only (Note [Network trust]): STORE, or packs|manifests|tags/<name>.
bool is_store_dir(const std::string& d) {
  return d == "packs" || d == "manifests" || d == "tags";
}
bool is_store_key(const std::string& key) {
  if (key == "STORE") return true;
  auto slash = key.find('/');
  if (slash == std::string::npos || !is_store_dir(key.substr(0, slash))) return false;
  std::string name = key.substr(slash + 1);
  if (name.empty() || name.size() > 200 || name[0] == '.') return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
      return false;
  return true;
}

// Reads a reply: ok fields (and the payload it announces into *payload) or the error it carries.
// *whole: the reply was read to its end (an ok with its payload, or an error line), so that the
// connection is in step for the next operation.
Result<std::map<std::string, std::string>> read_reply(Conn& c, std::vector<std::byte>* payload,
                                                      bool* whole) {
  *whole = false;
  GCR_TRY_ASSIGN(std::string line, c.line());
  if (line.rfind("error ", 0) == 0) {
    *whole = true;
    std::string rest = line.substr(6);
    auto sp = rest.find(' ');
    return Error{static_cast<Errc>(std::atoi(rest.substr(0, sp).c_str())),
                 decode_value(sp == std::string::npos ? "" : rest.substr(sp + 1))};
  }
  if (line != "ok" && line.rfind("ok ", 0) != 0)
    return Error{Errc::protocol, "the destination gcrd sent '" + line.substr(0, 80) + "'"};
  auto f = decode_fields(line.size() > 3 ? line.substr(3) : "");
  std::uint64_t n = field_u64(f, "len");
  if (n > kMaxPayload) return Error{Errc::protocol, "a reply of more than 1 GiB"};
  if (payload) {
    payload->resize(n);
    GCR_TRY(c.bytes(payload->data(), n));
  } else if (n != 0) {
    return Error{Errc::protocol, "an unexpected payload from the destination gcrd"};
  }
  *whole = true;
  return f;
}

class NetBackend final : public store::Backend {
 public:
  NetBackend(std::string address, NetKey token, std::string verb)
      : address_(std::move(address)),
        token_(std::move(token)),
        verb_(std::move(verb)),
        name_("gcr://" + address_ + (verb_ == "store" ? "" : " (" + verb_ + ")")) {}

  const std::string& name() const override { return name_; }

  Result<std::vector<std::string>> list(const std::string& dir) override {
    std::vector<std::byte> body;
    GCR_TRY(call("list", {{"dir", dir}}, {}, &body));
    std::vector<std::string> out;
    std::string text(reinterpret_cast<const char*>(body.data()), body.size());
    for (std::size_t at = 0; at < text.size();) {
      auto nl = text.find('\n', at);
      if (nl == std::string::npos) nl = text.size();
      if (nl > at) out.push_back(text.substr(at, nl - at));
      at = nl + 1;
    }
    return out;
  }

  Result<store::DirListing> list_detailed(const std::string& dir) override {
    std::vector<std::byte> body;
    GCR_TRY_ASSIGN(auto f, call("list_detailed", {{"dir", dir}}, {}, &body));
    store::DirListing out;
    out.now_unix = static_cast<std::int64_t>(field_u64(f, "now"));
    std::string text(reinterpret_cast<const char*>(body.data()), body.size());
    std::istringstream in(text);
    store::ObjectInfo o;
    while (in >> o.name >> o.bytes >> o.modified_unix) out.objects.push_back(o);
    return out;
  }

  Result<std::vector<std::byte>> get(const std::string& key, std::uint64_t max_bytes) override {
    std::vector<std::byte> body;
    GCR_TRY(call("get", {{"key", key}, {"max", std::to_string(max_bytes)}}, {}, &body));
    return body;
  }

  Status get_range(const std::string& key, std::uint64_t offset,
                   std::span<std::byte> out) override {
    std::vector<std::byte> body;
    GCR_TRY(call(
        "get_range",
        {{"key", key}, {"offset", std::to_string(offset)}, {"len", std::to_string(out.size())}}, {},
        &body));
    if (body.size() != out.size())
      return Error{Errc::protocol, "a ranged read of " + key + " came back short"};
    std::memcpy(out.data(), body.data(), body.size());
    return ok();
  }

  Status put(const std::string& key, std::span<const std::byte> bytes,
             store::PutMode mode) override {
    return status_of(call("put",
                          {{"key", key},
                           {"len", std::to_string(bytes.size())},
                           {"mode", mode == store::PutMode::replace ? "replace" : "create"}},
                          bytes, nullptr));
  }

  Result<store::Versioned> get_versioned(const std::string& key, std::uint64_t max_bytes) override {
    store::Versioned v;
    GCR_TRY_ASSIGN(auto f, call("get_versioned", {{"key", key}, {"max", std::to_string(max_bytes)}},
                                {}, &v.bytes));
    v.version = f.count("version") ? f.at("version") : "";
    return v;
  }

  Status put_if(const std::string& key, std::span<const std::byte> bytes,
                const std::string& version) override {
    return status_of(
        call("put_if", {{"key", key}, {"len", std::to_string(bytes.size())}, {"version", version}},
             bytes, nullptr));
  }

  Status remove(const std::string& key) override {
    return status_of(call("remove", {{"key", key}}, {}, nullptr));
  }

  unsigned parallelism() const override { return 4; }

 private:
  // One operation on a pooled connection; a connection that failed mid-operation is dropped.
  Result<std::map<std::string, std::string>> call(const std::string& op,
                                                  const std::map<std::string, std::string>& fields,
                                                  std::span<const std::byte> payload,
                                                  std::vector<std::byte>* body) {
    UniqueFd fd;
    {
      std::lock_guard lock(mu_);
      if (!idle_.empty()) {
        fd = std::move(idle_.back());
        idle_.pop_back();
      }
    }
    if (!fd) {
      GCR_TRY_ASSIGN(fd, net_connect(address_, token_, verb_));
    }
    Conn c(fd.get());
    GCR_TRY(c.send(head(op, fields), payload));
    bool whole = false;
    auto reply = read_reply(c, body, &whole);
    if (!whole) return reply;  // out of step, or gone: the connection is dropped
    std::lock_guard lock(mu_);
    idle_.push_back(std::move(fd));
    return reply;
  }

  std::string address_;
  NetKey token_;
  std::string verb_;  // "store", or "memory": Note [Checkpoints in peers' memory]
  std::string name_;
  std::mutex mu_;
  std::vector<UniqueFd> idle_;
};

}  // namespace

std::chrono::milliseconds net_timeout() {
  return settings().net_timeout;  // GCR_NET_TIMEOUT_MS
}

void watch_peer(int fd) {
  const auto ms = static_cast<unsigned>(net_timeout().count());
  int on = 1, idle = static_cast<int>(std::max(1u, ms / 2000)), interval = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms);
}

namespace {

// connect(2) bounded by net_timeout(): 0 or an errno.
int connect_within(int fd, const sockaddr* addr, socklen_t len) {
  int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int err = 0;
  if (::connect(fd, addr, len) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int n;
      do {
        n = ::poll(&p, 1, static_cast<int>(net_timeout().count()));
      } while (n < 0 && errno == EINTR);
      socklen_t elen = sizeof err;
      if (n == 0)
        err = ETIMEDOUT;
      else if (n < 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0)
        err = errno;
    }
  }
  ::fcntl(fd, F_SETFL, flags);
  return err;
}

}  // namespace

Result<UniqueFd> net_connect(const std::string& address, const NetKey& token,
                             const std::string& verb) {
  std::string host = address, port;
  if (!host.empty() && host[0] == '[') {
    auto close = host.find(']');
    if (close == std::string::npos || close + 1 >= host.size() || host[close + 1] != ':')
      return Error{Errc::invalid_argument, "'" + address + "' is not [IPv6]:PORT"};
    port = host.substr(close + 2);
    host = host.substr(1, close - 1);
  } else {
    auto colon = host.rfind(':');
    if (colon == std::string::npos)
      return Error{Errc::invalid_argument, "'" + address + "' is not HOST:PORT"};
    port = host.substr(colon + 1);
    host = host.substr(0, colon);
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return Error{Errc::unreachable, "cannot resolve " + address + ": " + gai_strerror(rc)};
  UniqueFd fd;
  int err = 0;
  for (addrinfo* a = res; a; a = a->ai_next) {
    fd.reset(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd) continue;
    err = connect_within(fd.get(), a->ai_addr, a->ai_addrlen);
    if (err == 0) break;
    fd.reset();
  }
  ::freeaddrinfo(res);
  if (!fd)  // refused: the host answers and nothing listens; else it may not be reachable at all
    return Error{err == ECONNREFUSED ? Errc::not_found : Errc::unreachable,
                 "cannot connect to gcrd at " + address + ": " +
                     std::strerror(err ? err : ECONNREFUSED) +
                     " (is `gcr daemon --listen` running there?)"};
  int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  watch_peer(fd.get());
  const auto deadline = std::chrono::steady_clock::now() + net_timeout();
  const bool plaintext = settings().test_hooks.net_plaintext;  // a benchmark's rows in clear
  GCR_TRY_ASSIGN(
      SessionKey key,
      prove_token(fd.get(), token, verb, deadline, plaintext).context("gcrd at " + address));
  if (plaintext) return fd;
  return start_tls(std::move(fd), TlsRole::client, key, deadline).context("gcrd at " + address);
}

Result<std::uint64_t> net_stage(const std::string& address, const NetKey& token,
                                const std::string& name) {
  GCR_TRY_ASSIGN(UniqueFd fd, net_connect(address, token, "request"));
  GCR_TRY_ASSIGN(auto reply, call(fd.get(), "stage", {{"name", name}}, nullptr));
  return field_u64(reply, "loaded_bytes");
}

Status remove_remote_part(const std::string& address, const std::string& id, const NetKey& key) {
  GCR_TRY_ASSIGN(UniqueFd fd, net_connect(address, key, "request"));
  GCR_TRY_ASSIGN(auto reply,
                 call(fd.get(), "tier", {{"op", "remove"}, {"id", id}}, [](const std::string&) {}));
  (void)reply;
  return ok();
}

Result<std::unique_ptr<store::Backend>> open_net_backend(const std::string& address,
                                                         const NetKey& token, NetStore which) {
  const bool memory = which == NetStore::memory;
  auto backend = std::make_unique<NetBackend>(address, token, memory ? "memory" : "store");
  GCR_TRY(status_of(backend->list("tags"))
              .context(std::string("reaching the ") + (memory ? "peer memory" : "store") +
                       " of gcrd at " + address));
  return std::unique_ptr<store::Backend>(std::move(backend));
}

Result<NetChannel> net_accept(UniqueFd fd, const PeerKeys& keys, std::chrono::milliseconds limit) {
  GCR_TRY_ASSIGN(TokenProven proven,
                 check_token_proof(fd.get(), keys, limit, settings().test_hooks.net_plaintext));
  if (proven.plaintext) return NetChannel{std::move(proven.verb), std::move(fd), proven.peer};
  GCR_TRY_ASSIGN(UniqueFd plain,
                 start_tls(std::move(fd), TlsRole::server, proven.key, proven.deadline));
  return NetChannel{std::move(proven.verb), std::move(plain), proven.peer};
}

namespace {

// Note [What a peer can make gcrd hold]
// A payload is read as it arrives, its buffer growing with what came (a peer that announces 1 GiB
// and sends nothing makes gcrd allocate nothing), after its operation and key were checked; and all
// payloads held at once, over every connection, stay under kPayloadBudget (8 GiB): past it a put or
// ranged read is refused as busy and the connection ended. Device memory staged for a peer is
// bounded apart (Note [Staged restore] in daemon/staged.h).
constexpr std::uint64_t kPayloadBudget = 8ull << 30;  // two peers pushing 1 GiB packs 4 at a time
constexpr std::size_t kReadPiece = 16u << 20;
std::atomic<std::uint64_t> payload_held{0};

class PayloadHold {
 public:
  bool take(std::uint64_t n) {
    std::uint64_t held = payload_held.load();
    do {
      if (held + n > kPayloadBudget) return false;
    } while (!payload_held.compare_exchange_weak(held, held + n));
    bytes_ = n;
    return true;
  }
  ~PayloadHold() { payload_held -= bytes_; }

 private:
  std::uint64_t bytes_ = 0;
};

// One operation of a store session (docs/protocol.md §14), as its handler sees it.
struct NetOp {
  Conn& c;
  store::Backend& store;
  std::map<std::string, std::string> f;
  std::string key;
  std::uint64_t len = 0;

  // Note [Network trust]: nothing sent names a path on this host, errors included (the served
  // store's directory becomes "the store").
  Status fail(const Error& e) {
    std::string message = e.message;
    const std::string& root = store.name();
    for (std::size_t at; !root.empty() && (at = message.find(root)) != std::string::npos;)
      message.replace(at, root.size(), "the store");
    return c.send("error " + std::to_string(static_cast<int>(e.code)) + " " +
                  encode_value(message) + "\n");
  }
  std::string text(const char* k) const {
    auto it = f.find(k);
    return it == f.end() ? "" : it->second;
  }
};

Status serve_list(NetOp& op, bool detailed) {
  const std::string dir = op.text("dir");
  if (!is_store_dir(dir))
    return op.fail(Error{Errc::invalid_argument, "not a store directory: " + dir.substr(0, 80)});
  std::string body;
  std::map<std::string, std::string> reply;
  if (!detailed) {
    auto names = op.store.list(dir);
    if (!names) return op.fail(names.error());
    for (const auto& n : *names) body += n + "\n";
  } else {
    auto listing = op.store.list_detailed(dir);
    if (!listing) return op.fail(listing.error());
    for (const auto& o : listing->objects)
      body += o.name + " " + std::to_string(o.bytes) + " " + std::to_string(o.modified_unix) + "\n";
    reply["now"] = std::to_string(listing->now_unix);
  }
  reply["len"] = std::to_string(body.size());
  return op.c.send(head("ok", reply), std::as_bytes(std::span(body.data(), body.size())));
}

Status serve_get(NetOp& op, bool versioned) {
  const std::uint64_t max = std::min<std::uint64_t>(field_u64(op.f, "max"), kMaxPayload);
  if (!versioned) {
    auto bytes = op.store.get(op.key, max);
    return bytes ? op.c.send(head("ok", {{"len", std::to_string(bytes->size())}}), *bytes)
                 : op.fail(bytes.error());
  }
  auto v = op.store.get_versioned(op.key, max);
  return v ? op.c.send(
                 head("ok", {{"len", std::to_string(v->bytes.size())}, {"version", v->version}}),
                 v->bytes)
           : op.fail(v.error());
}

Status serve_get_range(NetOp& op) {
  if (op.len > kMaxPayload)
    return op.fail(Error{Errc::invalid_argument, "a ranged read of more than 1 GiB"});
  PayloadHold hold;
  if (!hold.take(op.len))
    return op.fail(Error{Errc::busy, "gcrd holds its most for peers now: try again"});
  std::vector<std::byte> out(op.len);
  Status got = op.store.get_range(op.key, field_u64(op.f, "offset"), out);
  return got ? op.c.send(head("ok", {{"len", std::to_string(out.size())}}), out)
             : op.fail(got.error());
}

// A put's payload, read as it arrives; an error ends the session (the stream is out of step).
Result<std::vector<std::byte>> receive_payload(NetOp& op, PayloadHold& hold) {
  if (op.len > kMaxPayload) return Error{Errc::invalid_argument, "a payload of more than 1 GiB"};
  if (!hold.take(op.len)) return Error{Errc::busy, "gcrd holds its most for peers now: try again"};
  std::vector<std::byte> in;
  while (in.size() < op.len) {
    const std::size_t at = in.size();
    in.resize(at + std::min<std::uint64_t>(kReadPiece, op.len - at));
    GCR_TRY(op.c.bytes(in.data() + at, in.size() - at));
  }
  return in;
}

Status serve_put(NetOp& op, bool conditional) {
  PayloadHold hold;
  auto in = receive_payload(op, hold);
  if (!in) {
    (void)op.fail(in.error());
    return std::move(in).error();
  }
  Status put = conditional
                   ? op.store.put_if(op.key, *in, op.text("version"))
                   : op.store.put(op.key, *in,
                                  op.text("mode") == "replace" ? store::PutMode::replace
                                                               : store::PutMode::create_only);
  return put ? op.c.send("ok\n") : op.fail(put.error());
}

Status serve_op(NetOp& op, const std::string& verb) {
  if (verb == "list" || verb == "list_detailed") return serve_list(op, verb == "list_detailed");
  const bool put = verb == "put" || verb == "put_if";
  if (!is_store_key(op.key)) {
    Status told =
        op.fail(Error{Errc::invalid_argument, "not a store object: " + op.key.substr(0, 80)});
    // A put's payload follows: out of step from here, so the session ends.
    return put ? Error{Errc::invalid_argument, "not a store object"} : told;
  }
  if (verb == "get" || verb == "get_versioned") return serve_get(op, verb == "get_versioned");
  if (verb == "get_range") return serve_get_range(op);
  if (put) return serve_put(op, verb == "put_if");
  if (verb == "remove") {
    Status removed = op.store.remove(op.key);
    return removed ? op.c.send("ok\n") : op.fail(removed.error());
  }
  return op.fail(Error{Errc::invalid_argument, "unknown operation '" + verb.substr(0, 40) + "'"});
}

}  // namespace

void serve_net_store(int fd, store::Backend& store) {
  Conn c(fd);
  for (;;) {
    auto line = c.line();
    if (!line) return;
    const auto sp = line->find(' ');
    NetOp op{c, store, decode_fields(sp == std::string::npos ? "" : line->substr(sp + 1)), "", 0};
    op.key = op.text("key");
    op.len = field_u64(op.f, "len");
    if (!serve_op(op, line->substr(0, sp))) return;
  }
}

}  // namespace gcr::gcrd
