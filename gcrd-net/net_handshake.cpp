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

std::string proof(const std::string& token, const char* role, const std::string& verb,
                  const std::string& client_nonce, const std::string& server_nonce) {
  const std::string message =
      std::string(kNetProtocol) + " " + role + " " + verb + " " + client_nonce + " " + server_nonce;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &len);
  return hex(mac, len);
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

Status prove_token(int fd, const std::string& token, const std::string& verb,
                   Clock::time_point deadline) {
  GCR_TRY_ASSIGN(std::string mine, fresh_nonce());
  GCR_TRY(send_handshake_line(
      fd, std::string(kNetProtocol) + " " + verb + " " + encode_fields({{"nonce", mine}})));
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
  return send_handshake_line(
      fd, encode_fields({{"proof", proof(token, "client", verb, mine, theirs)}}));
}

Result<std::string> check_token_proof(int fd, const std::string& token,
                                      std::chrono::milliseconds limit) {
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
  const std::string verb = sp1 == std::string::npos ? "" : line.substr(sp1 + 1, sp2 - sp1 - 1);
  if (verb != "store" && verb != "request")
    return refuse(Errc::invalid_argument, "unknown verb '" + verb + "'");
  const std::string theirs =
      field(decode_fields(sp2 == std::string::npos ? "" : line.substr(sp2 + 1)), "nonce");
  if (!is_nonce(theirs)) return refuse(Errc::protocol, "no nonce of 64 hex digits");
  GCR_TRY_ASSIGN(std::string mine, fresh_nonce());
  GCR_TRY(send_handshake_line(
      fd, "challenge " + encode_fields({{"nonce", mine},
                                        {"proof", proof(token, "server", verb, theirs, mine)}})));
  GCR_TRY_ASSIGN(std::string answer, line_before(fd, deadline, "proof"));
  const std::string given = field(decode_fields(answer), "proof");
  if (!same_time_equal(given, proof(token, "client", verb, theirs, mine)))
    return refuse(Errc::permission_denied, "wrong token");
  return verb;
}

}  // namespace gcr::gcrd
