// net_handshake.h: Note [Proving the token].
#include "net_handshake.h"

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>

#include "gcrd_protocol.h"

namespace gcr::gcrd {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kNonceBytes = 32;
constexpr std::size_t kMaxHandshakeLine = 512;

std::string hex(const unsigned char* p, std::size_t n) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

Result<std::string> fresh_nonce() {
  std::array<unsigned char, kNonceBytes> n{};
  for (std::size_t got = 0; got < n.size();) {
    ssize_t r = ::getrandom(n.data() + got, n.size() - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno_error("getrandom");
    got += static_cast<std::size_t>(r);
  }
  return hex(n.data(), n.size());
}

// The name a key goes by in what is signed: "-" for the bare token.
std::string signed_name(const NetKey& key) {
  return key.name.empty() ? "-" : key.name;
}

std::string proof(const NetKey& key, const char* role, const std::string& verb,
                  const std::string& client_nonce, const std::string& server_nonce) {
  const std::string& token = key.secret;
  const std::string message = std::string(kNetProtocol) + " " + role + " " + verb + " " +
                              signed_name(key) + " " + client_nonce + " " + server_nonce;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &len);
  return hex(mac, len);
}

SessionKey session_key(const NetKey& key, const std::string& verb, const std::string& client_nonce,
                       const std::string& server_nonce) {
  const std::string& token = key.secret;
  const std::string message = std::string(kNetProtocol) + " tls " + verb + " " + signed_name(key) +
                              " " + client_nonce + " " + server_nonce;
  SessionKey out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), out.data(), &len);
  return out;
}

// What is signed for the verb: a session without TLS (the benchmark hook) says so, so that a
// "tls=0" added on the path fails the proofs instead of turning encryption off.
std::string signed_verb(const std::string& verb, bool plaintext) {
  return plaintext ? verb + "/plaintext" : verb;
}

bool same_time_equal(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

bool is_nonce(const std::string& s) {
  return s.size() == 2 * kNonceBytes &&
         s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

Status send_handshake_line(int fd, const std::string& line) {
  const std::string text = line + "\n";
  for (std::size_t sent = 0; sent < text.size();) {
    ssize_t w = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      Error e = errno_error("writing to the network", errno);
      e.code = Errc::unreachable;
      return e;
    }
    sent += static_cast<std::size_t>(w);
  }
  return ok();
}

// One line, whole before `deadline`. What follows it is the next reader's: the bytes there are
// looked at (MSG_PEEK) and only the line's taken, a few calls a line rather than two a byte.
Result<std::string> line_before(int fd, Clock::time_point deadline, const char* what) {
  std::string line;
  char buf[kMaxHandshakeLine + 1];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd, POLLIN, 0};
    int ready = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) return Error{Errc::timeout, std::string("no whole ") + what + " in time"};
    const std::size_t room = kMaxHandshakeLine + 1 - line.size();
    ssize_t seen = ::recv(fd, buf, room, MSG_PEEK);
    if (seen < 0 && errno == EINTR) continue;
    if (seen == 0)
      return Error{Errc::unreachable, std::string("the connection closed before ") + what};
    if (seen < 0) {
      Error e = errno_error(std::string("reading ") + what, errno);
      e.code = Errc::unreachable;
      return e;
    }
    const char* nl =
        static_cast<const char*>(std::memchr(buf, '\n', static_cast<std::size_t>(seen)));
    const std::size_t take =
        nl ? static_cast<std::size_t>(nl - buf) + 1 : static_cast<std::size_t>(seen);
    ssize_t got;
    do {
      got = ::recv(fd, buf, take, 0);  // what was seen is there: this does not wait
    } while (got < 0 && errno == EINTR);
    if (got != static_cast<ssize_t>(take)) {
      Error e = errno_error(std::string("reading ") + what, got < 0 ? errno : EIO);
      e.code = Errc::unreachable;
      return e;
    }
    line.append(buf, nl ? take - 1 : take);
    if (nl) return line;
    if (line.size() > kMaxHandshakeLine)
      return Error{Errc::protocol, std::string(what) + " longer than 512 bytes"};
  }
}

// "word k=v ..." -> its fields, when the first word is `word`.
std::optional<std::map<std::string, std::string>> fields_after(const std::string& line,
                                                               const std::string& word) {
  if (line != word && line.rfind(word + " ", 0) != 0) return std::nullopt;
  return decode_fields(line.size() > word.size() ? line.substr(word.size() + 1) : "");
}

std::string field(const std::map<std::string, std::string>& f, const char* key) {
  auto it = f.find(key);
  return it == f.end() ? "" : it->second;
}

}  // namespace

Result<SessionKey> prove_token(int fd, const NetKey& token, const std::string& plain_verb,
                               Clock::time_point deadline, bool plaintext) {
  GCR_TRY_ASSIGN(std::string mine, fresh_nonce());
  std::map<std::string, std::string> first{{"nonce", mine}};
  if (!token.name.empty()) first["key"] = token.name;
  if (plaintext) first["tls"] = "0";
  GCR_TRY(send_handshake_line(
      fd, std::string(kNetProtocol) + " " + plain_verb + " " + encode_fields(first)));
  const std::string verb = signed_verb(plain_verb, plaintext);
  GCR_TRY_ASSIGN(std::string line, line_before(fd, deadline, "the peer's challenge"));
  if (auto refusal = fields_after(line, "error")) {  // "error <errc> <message>"
    const auto sp = line.find(' ', 6);
    std::string why = sp == std::string::npos ? line : decode_value(line.substr(sp + 1));
    return Error{Errc::permission_denied, "the peer refused the connection: " + why};
  }
  auto challenge = fields_after(line, "challenge");
  const std::string theirs = challenge ? field(*challenge, "nonce") : "";
  if (!challenge || !is_nonce(theirs))
    return Error{Errc::protocol, "the peer does not speak " + std::string(kNetProtocol) +
                                     " (an older gcr, or not gcrd at all); nothing was sent to it"};
  if (!same_time_equal(field(*challenge, "proof"), proof(token, "server", verb, mine, theirs)))
    return Error{Errc::permission_denied,
                 "wrong token: the peer could not prove it holds ours (another token file on one "
                 "side, or not gcrd on that port); nothing that proves ours was sent to it"};
  GCR_TRY(send_handshake_line(
      fd, encode_fields({{"proof", proof(token, "client", verb, mine, theirs)}})));
  return session_key(token, verb, mine, theirs);
}

Result<TokenProven> check_token_proof(int fd, const PeerKeys& keys, std::chrono::milliseconds limit,
                                      bool allow_plaintext) {
  const auto deadline = Clock::now() + limit;
  auto refuse = [&](Errc code, const std::string& why) -> Error {
    (void)send_handshake_line(
        fd, "error " + std::to_string(static_cast<int>(code)) + " " + encode_value(why));
    return Error{code, why};
  };
  GCR_TRY_ASSIGN(std::string line, line_before(fd, deadline, "first line"));
  const auto sp1 = line.find(' ');
  const auto sp2 = sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
  if (line.substr(0, sp1) != kNetProtocol)
    return refuse(Errc::unsupported, std::string("this gcrd speaks ") + kNetProtocol +
                                         ": upgrade gcr on the host that connects");
  const std::string plain_verb =
      sp1 == std::string::npos ? "" : line.substr(sp1 + 1, sp2 - sp1 - 1);
  if (plain_verb != "store" && plain_verb != "memory" && plain_verb != "request")
    return refuse(Errc::invalid_argument, "unknown verb '" + plain_verb + "'");
  const auto first = decode_fields(sp2 == std::string::npos ? "" : line.substr(sp2 + 1));
  const bool plaintext = field(first, "tls") == "0";
  if (plaintext && !allow_plaintext)
    return refuse(Errc::permission_denied,
                  "this gcrd requires TLS (GCR_NET_PLAINTEXT=1 is a benchmark hook both ends set)");
  const std::string verb = signed_verb(plain_verb, plaintext);
  const std::string theirs = field(first, "nonce");
  if (!is_nonce(theirs)) return refuse(Errc::protocol, "no nonce of 64 hex digits");
  // Note [Per-peer keys]: a name this gcrd does not know is answered as a wrong proof would be,
  // after a challenge signed with a key of nobody's (names cannot be probed).
  const NetKey* found = keys.find(field(first, "key"));
  auto unguessable = fresh_nonce();
  const NetKey nobody{"?", unguessable ? *unguessable : std::string(64, 'x'), std::nullopt};
  const NetKey& token = found ? *found : nobody;
  GCR_TRY_ASSIGN(std::string mine, fresh_nonce());
  GCR_TRY(send_handshake_line(
      fd, "challenge " + encode_fields({{"nonce", mine},
                                        {"proof", proof(token, "server", verb, theirs, mine)}})));
  GCR_TRY_ASSIGN(std::string answer, line_before(fd, deadline, "proof"));
  const std::string given = field(decode_fields(answer), "proof");
  if (!found || !same_time_equal(given, proof(token, "client", verb, theirs, mine)))
    return refuse(Errc::permission_denied, "wrong token");
  return TokenProven{plain_verb, session_key(token, verb, theirs, mine), deadline, found,
                     plaintext};
}

}  // namespace gcr::gcrd
