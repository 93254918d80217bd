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
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

#include "gcrd_client.h"
#include "gcrd_protocol.h"

namespace gcr::gcrd {
namespace {

constexpr std::uint64_t kMaxPayload = 1ull << 30;  // a pack is 16 MiB; a manifest far less
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

bool same_time_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
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
  NetBackend(std::string address, std::string token)
      : address_(std::move(address)), token_(std::move(token)), name_("gcr://" + address_) {}

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
      GCR_TRY_ASSIGN(fd, net_connect(address_, token_, "store"));
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

  std::string address_, token_, name_;
  std::mutex mu_;
  std::vector<UniqueFd> idle_;
};

}  // namespace

Result<std::string> read_token_file(const std::filesystem::path& path, bool for_server) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errno_error("token file " + path.string());
  if (for_server && ((st.st_mode & 077) != 0 || st.st_uid != ::geteuid()))
    return Error{Errc::permission_denied,
                 "token file " + path.string() +
                     " must belong to gcrd's user and be readable by it alone (chmod 600): whoever "
                     "reads it may restore processes here"};
  std::ifstream in(path);
  std::string token;
  std::getline(in, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.size() < 32)
    return Error{Errc::invalid_argument,
                 "token file " + path.string() +
                     " holds fewer than 32 characters; make one with: head -c 32 /dev/urandom | "
                     "xxd -p -c 64 > FILE"};
  return token;
}

std::chrono::milliseconds net_timeout() {
  static const std::chrono::milliseconds t = [] {
    const char* v = std::getenv("GCR_NET_TIMEOUT_MS");
    long long ms = v ? std::atoll(v) : 0;
    return std::chrono::milliseconds(ms >= 500 && ms <= 3'600'000 ? ms : 15'000);
  }();
  return t;
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

Result<UniqueFd> net_connect(const std::string& address, const std::string& token,
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
  Conn c(fd.get());
  GCR_TRY(c.send(std::string(kNetProtocol) + " " + verb + " " + encode_fields({{"token", token}}) +
                 "\n"));
  return fd;
}

Result<std::uint64_t> net_stage(const std::string& address, const std::string& token,
                                const std::string& name) {
  GCR_TRY_ASSIGN(UniqueFd fd, net_connect(address, token, "request"));
  GCR_TRY_ASSIGN(auto reply, call(fd.get(), "stage", {{"name", name}}, nullptr));
  return field_u64(reply, "loaded_bytes");
}

Result<std::unique_ptr<store::Backend>> open_net_backend(const std::string& address,
                                                         const std::string& token) {
  auto backend = std::make_unique<NetBackend>(address, token);
  GCR_TRY(status_of(backend->list("tags")).context("reaching the store of gcrd at " + address));
  return std::unique_ptr<store::Backend>(std::move(backend));
}

Result<std::string> net_accept(int fd, const std::string& token, std::chrono::milliseconds limit) {
  Conn c(fd);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  // Byte by byte: what follows the first line is the next reader's.
  std::string line;
  for (char ch;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    int ready = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0)
      return Error{Errc::timeout,
                   "no whole first line within " + std::to_string(limit.count()) + " ms"};
    ssize_t r = ::recv(fd, &ch, 1, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return Error{Errc::unreachable, "the connection closed before its first line"};
    if (ch == '\n') break;
    if (line.size() > 4096) return Error{Errc::protocol, "a first line longer than 4 KiB"};
    line += ch;
  }
  auto sp1 = line.find(' ');
  auto sp2 = sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
  std::string proto = line.substr(0, sp1);
  std::string verb = sp1 == std::string::npos ? "" : line.substr(sp1 + 1, sp2 - sp1 - 1);
  auto f = decode_fields(sp2 == std::string::npos ? "" : line.substr(sp2 + 1));
  auto refuse = [&](Errc code, const std::string& why) -> Error {
    (void)c.send("error " + std::to_string(static_cast<int>(code)) + " " + encode_value(why) +
                 "\n");
    return Error{code, why};
  };
  if (proto != kNetProtocol)
    return refuse(Errc::unsupported, std::string("this gcrd speaks ") + kNetProtocol);
  if (!f.count("token") || !same_time_equal(f.at("token"), token))
    return refuse(Errc::permission_denied, "wrong token");
  if (verb != "store" && verb != "request")
    return refuse(Errc::invalid_argument, "unknown verb '" + verb + "'");
  return verb;
}

void serve_net_store(int fd, store::Backend& store) {
  Conn c(fd);
  auto fail = [&](const Error& e) {
    return c.send("error " + std::to_string(static_cast<int>(e.code)) + " " +
                  encode_value(e.message) + "\n");
  };
  for (;;) {
    auto line = c.line();
    if (!line) return;
    auto sp = line->find(' ');
    std::string op = line->substr(0, sp);
    auto f = decode_fields(sp == std::string::npos ? "" : line->substr(sp + 1));
    std::string key = f.count("key") ? f.at("key") : "";
    std::uint64_t len = field_u64(f, "len");
    std::vector<std::byte> in;
    if (op == "put" || op == "put_if") {
      if (len > kMaxPayload) return;  // cannot resynchronize: hang up
      in.resize(len);
      if (!c.bytes(in.data(), len)) return;
    }
    Status sent = ok();
    if (op == "list" || op == "list_detailed") {
      std::string dir = f.count("dir") ? f.at("dir") : "";
      if (!is_store_dir(dir)) {
        sent = fail(Error{Errc::invalid_argument, "not a store directory: " + dir});
      } else if (op == "list") {
        auto names = store.list(dir);
        std::string body;
        if (names)
          for (const auto& n : *names) body += n + "\n";
        sent = names ? c.send(head("ok", {{"len", std::to_string(body.size())}}),
                              std::as_bytes(std::span(body.data(), body.size())))
                     : fail(names.error());
      } else {
        auto listing = store.list_detailed(dir);
        std::string body;
        if (listing)
          for (const auto& o : listing->objects)
            body += o.name + " " + std::to_string(o.bytes) + " " + std::to_string(o.modified_unix) +
                    "\n";
        sent = listing ? c.send(head("ok", {{"len", std::to_string(body.size())},
                                            {"now", std::to_string(listing->now_unix)}}),
                                std::as_bytes(std::span(body.data(), body.size())))
                       : fail(listing.error());
      }
    } else if (!is_store_key(key)) {
      sent = fail(Error{Errc::invalid_argument, "not a store object: " + key.substr(0, 80)});
    } else if (op == "get" || op == "get_versioned") {
      std::uint64_t max = std::min<std::uint64_t>(field_u64(f, "max"), kMaxPayload);
      if (op == "get") {
        auto bytes = store.get(key, max);
        sent = bytes ? c.send(head("ok", {{"len", std::to_string(bytes->size())}}), *bytes)
                     : fail(bytes.error());
      } else {
        auto v = store.get_versioned(key, max);
        sent = v ? c.send(head("ok",
                               {{"len", std::to_string(v->bytes.size())}, {"version", v->version}}),
                          v->bytes)
                 : fail(v.error());
      }
    } else if (op == "get_range") {
      if (len > kMaxPayload) {
        sent = fail(Error{Errc::invalid_argument, "a ranged read of more than 1 GiB"});
      } else {
        std::vector<std::byte> out(len);
        Status got = store.get_range(key, field_u64(f, "offset"), out);
        sent = got ? c.send(head("ok", {{"len", std::to_string(out.size())}}), out)
                   : fail(got.error());
      }
    } else if (op == "put") {
      Status put =
          store.put(key, in,
                    f.count("mode") && f.at("mode") == "replace" ? store::PutMode::replace
                                                                 : store::PutMode::create_only);
      sent = put ? c.send("ok\n") : fail(put.error());
    } else if (op == "put_if") {
      Status put = store.put_if(key, in, f.count("version") ? f.at("version") : "");
      sent = put ? c.send("ok\n") : fail(put.error());
    } else if (op == "remove") {
      Status removed = store.remove(key);
      sent = removed ? c.send("ok\n") : fail(removed.error());
    } else {
      sent = fail(Error{Errc::invalid_argument, "unknown operation '" + op.substr(0, 40) + "'"});
    }
    if (!sent) return;
  }
}

}  // namespace gcr::gcrd
