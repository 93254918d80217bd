// net_tls.h: Note [An encrypted channel].
#include "net_tls.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace gcr::gcrd {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kIdentity[] = "gcrd-net/3";
constexpr unsigned char kAes128GcmSha256[] = {0x13, 0x01};  // TLS_AES_128_GCM_SHA256
constexpr std::size_t kRelayChunk = 256u << 10;
constexpr std::size_t kRecordBytes = 16u << 10;  // TLS's largest record

struct SslFree {
  void operator()(SSL* s) const { SSL_free(s); }
};
using SslPtr = std::unique_ptr<SSL, SslFree>;

std::string ssl_errors() {
  std::string out;
  for (unsigned long e; (e = ERR_get_error()) != 0;) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    out += out.empty() ? "" : "; ";
    out += buf;
  }
  return out.empty() ? "the connection ended" : out;
}

// The session the key stands for: TLS 1.3, the one suite, the key as the PSK.
SSL_SESSION* psk_session(SSL* ssl) {
  const auto* key = static_cast<const SessionKey*>(SSL_get_app_data(ssl));
  const SSL_CIPHER* cipher = SSL_CIPHER_find(ssl, kAes128GcmSha256);
  SSL_SESSION* s = SSL_SESSION_new();
  if (!s || !cipher || !key || !SSL_SESSION_set1_master_key(s, key->data(), key->size()) ||
      !SSL_SESSION_set_cipher(s, cipher) || !SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION)) {
    SSL_SESSION_free(s);
    return nullptr;
  }
  return s;
}

int client_psk(SSL* ssl, const EVP_MD* md, const unsigned char** id, std::size_t* id_len,
               SSL_SESSION** session) {
  *session = nullptr;
  if (md && md != EVP_sha256()) return 1;  // a second offer for another hash: none
  *session = psk_session(ssl);
  *id = reinterpret_cast<const unsigned char*>(kIdentity);
  *id_len = sizeof kIdentity - 1;
  return *session ? 1 : 0;
}

int server_psk(SSL* ssl, const unsigned char* id, std::size_t id_len, SSL_SESSION** session) {
  *session = nullptr;
  if (id_len != sizeof kIdentity - 1 || std::memcmp(id, kIdentity, id_len) != 0) return 1;
  *session = psk_session(ssl);
  return *session ? 1 : 0;
}

SSL_CTX* make_context(TlsRole role) {
  SSL_CTX* ctx = SSL_CTX_new(role == TlsRole::client ? TLS_client_method() : TLS_server_method());
  if (!ctx) return nullptr;
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256");
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
  SSL_CTX_set_num_tickets(ctx, 0);  // no resumption: every connection proves the token again
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_read_ahead(ctx, 1);  // take what TCP has in one read, not a record's header first
  if (role == TlsRole::client)
    SSL_CTX_set_psk_use_session_callback(ctx, client_psk);
  else
    SSL_CTX_set_psk_find_session_callback(ctx, server_psk);
  return ctx;
}

SSL_CTX* context(TlsRole role) {  // one per role for the program's life
  static SSL_CTX* client = make_context(TlsRole::client);
  static SSL_CTX* server = make_context(TlsRole::server);
  return role == TlsRole::client ? client : server;
}

bool set_nonblocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

// Waits for what the last SSL call asked for, until the deadline.
Status wait_for(int fd, int ssl_error, Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0)
    return Error{Errc::timeout, "the peer did not finish the TLS handshake in time"};
  pollfd p{fd, static_cast<short>(ssl_error == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN), 0};
  int r = ::poll(&p, 1, static_cast<int>(left.count()));
  if (r < 0 && errno != EINTR) return errno_error("waiting for the peer's TLS handshake");
  return ok();
}

Status handshake(SSL* ssl, int fd, TlsRole role, Clock::time_point deadline) {
  for (;;) {
    ERR_clear_error();
    int r = role == TlsRole::client ? SSL_connect(ssl) : SSL_accept(ssl);
    if (r == 1) return ok();
    int e = SSL_get_error(ssl, r);
    if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
      return Error{Errc::permission_denied,
                   "TLS handshake with the peer failed (" + ssl_errors() +
                       "): it does not hold this token's key, or does not speak gcrd-net/3"};
    GCR_TRY(wait_for(fd, e, deadline));
  }
}

// Note [An encrypted channel]: the relay between the plain end and TLS, one thread, non-blocking
// both ways. `to_net` holds plain bytes read from the plain end and not yet taken by SSL_write,
// `to_app` decrypted bytes not yet written to the plain end; each is filled only when empty, so a
// side that does not read holds the other back (no buffering without bound).
class Relay {
 public:
  Relay(SslPtr ssl, UniqueFd net, UniqueFd app)
      : ssl_(std::move(ssl)), net_(std::move(net)), app_(std::move(app)) {
    to_net_.resize(kRelayChunk);
    to_app_.resize(kRelayChunk);
  }

  void run() {
    while (step() && wait()) {
    }
    if (!net_failed_ && !sent_close_) (void)SSL_shutdown(ssl_.get());  // best effort
  }

 private:
  // Moves whatever can move now; false when the relay is over: both sides said all they had and
  // it was delivered, or a side failed.
  bool step() {
    for (bool moved = true; moved;) {
      moved = false;
      if (!pump_app_to_net(moved) || !pump_net_to_app(moved)) return false;
      if (app_eof_ && to_net_off_ == to_net_len_ && !sent_close_) {
        // The plain end is done: close_notify tells the peer's relay, whose plain end then reads
        // end of file, closes, and so ends the peer's side too.
        ERR_clear_error();
        (void)SSL_shutdown(ssl_.get());
        sent_close_ = true;
      }
    }
    return !(sent_close_ && net_eof_ && to_app_off_ == to_app_len_);
  }

  bool pump_app_to_net(bool& moved) {
    if (to_net_off_ == to_net_len_ && !app_eof_) {
      ssize_t n = ::recv(app_.get(), to_net_.data(), to_net_.size(), MSG_DONTWAIT);
      if (n > 0) {
        to_net_off_ = 0;
        to_net_len_ = static_cast<std::size_t>(n);
        moved = true;
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        app_eof_ = true;
        moved = true;
      }
    }
    if (to_net_off_ == to_net_len_) return true;
    ERR_clear_error();
    int w = SSL_write(ssl_.get(), to_net_.data() + to_net_off_,
                      static_cast<int>(to_net_len_ - to_net_off_));
    if (w > 0) {
      to_net_off_ += static_cast<std::size_t>(w);
      moved = true;
      return true;
    }
    return note_want(SSL_get_error(ssl_.get(), w), write_wants_);
  }

  bool pump_net_to_app(bool& moved) {
    if (to_app_off_ == to_app_len_ && !net_eof_) {
      to_app_off_ = to_app_len_ = 0;
      // A record at a time (16 KiB at most): gather what is there into one write to the plain end.
      int r = 0;
      while (to_app_.size() - to_app_len_ >= kRecordBytes) {
        ERR_clear_error();
        r = SSL_read(ssl_.get(), to_app_.data() + to_app_len_,
                     static_cast<int>(to_app_.size() - to_app_len_));
        if (r <= 0) break;
        to_app_len_ += static_cast<std::size_t>(r);
      }
      if (to_app_len_ > 0) {
        moved = true;
      } else {
        int e = SSL_get_error(ssl_.get(), r);
        if (e == SSL_ERROR_ZERO_RETURN) {
          net_eof_ = true;
          moved = true;
        } else if (!note_want(e, read_wants_)) {
          return false;
        }
      }
    }
    if (to_app_off_ < to_app_len_) {
      ssize_t n = ::send(app_.get(), to_app_.data() + to_app_off_, to_app_len_ - to_app_off_,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        to_app_off_ += static_cast<std::size_t>(n);
        moved = true;
      } else if (errno != EAGAIN && errno != EINTR) {
        return false;  // the plain end is closed: nobody is left to read
      }
    }
    if (net_eof_ && to_app_off_ == to_app_len_ && !app_shut_) {
      ::shutdown(app_.get(), SHUT_WR);  // the peer is done: the plain end reads end of file
      app_shut_ = true;
    }
    return true;
  }

  // What an SSL call that did not finish waits for; false on a real failure.
  bool note_want(int e, short& wants) {
    if (e == SSL_ERROR_WANT_READ) {
      wants = POLLIN;
      return true;
    }
    if (e == SSL_ERROR_WANT_WRITE) {
      wants = POLLOUT;
      return true;
    }
    net_failed_ = true;
    return false;
  }

  bool wait() {
    pollfd p[2] = {{app_.get(), 0, 0}, {net_.get(), 0, 0}};
    if (to_net_off_ == to_net_len_ && !app_eof_) p[0].events |= POLLIN;
    if (to_app_off_ < to_app_len_) p[0].events |= POLLOUT;
    if (to_net_off_ < to_net_len_) p[1].events |= write_wants_;
    if (to_app_off_ == to_app_len_ && !net_eof_) p[1].events |= read_wants_;
    write_wants_ = read_wants_ = POLLIN;
    for (pollfd& one : p)
      if (one.events == 0) one.fd = -1;  // a hung-up side waited on for nothing would spin
    int r = ::poll(p, 2, -1);
    return r >= 0 || errno == EINTR;
  }

  SslPtr ssl_;
  UniqueFd net_, app_;
  std::vector<char> to_net_, to_app_;
  std::size_t to_net_off_ = 0, to_net_len_ = 0, to_app_off_ = 0, to_app_len_ = 0;
  short write_wants_ = POLLIN, read_wants_ = POLLIN;
  bool app_eof_ = false, net_eof_ = false, app_shut_ = false;
  bool sent_close_ = false, net_failed_ = false;
};

}  // namespace

Result<UniqueFd> start_tls(UniqueFd connection, TlsRole role, const SessionKey& key,
                           Clock::time_point deadline) {
  SSL_CTX* ctx = context(role);
  if (!ctx) return Error{Errc::internal, "cannot set up TLS: " + ssl_errors()};
  if (!set_nonblocking(connection.get())) return errno_error("setting up the TLS connection");
  SslPtr ssl(SSL_new(ctx));
  auto owned_key = std::make_unique<SessionKey>(key);
  if (!ssl || !SSL_set_fd(ssl.get(), connection.get()))
    return Error{Errc::internal, "cannot set up TLS: " + ssl_errors()};
  SSL_set_app_data(ssl.get(), owned_key.get());
  GCR_TRY(handshake(ssl.get(), connection.get(), role, deadline));
  SSL_set_app_data(ssl.get(), nullptr);  // the key is not needed again: no resumption

  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
    return errno_error("creating the TLS relay's socket pair");
  UniqueFd plain(pair[0]), relay_end(pair[1]);
  if (!set_nonblocking(relay_end.get())) return errno_error("setting up the TLS relay");
  auto relay = std::make_shared<Relay>(std::move(ssl), std::move(connection), std::move(relay_end));
  try {
    std::thread([relay] {
      pthread_setname_np(pthread_self(), "gcr-tls");
      relay->run();
    }).detach();
  } catch (const std::system_error&) {
    return Error{Errc::internal, "cannot start the TLS relay's thread"};
  }
  return plain;
}

}  // namespace gcr::gcrd
