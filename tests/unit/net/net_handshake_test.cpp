// The handshake of gcrd-net/3 on a socket pair (Note [Proving the token], Note [Per-peer keys]):
// named keys, a name the server does not know, and the benchmark hook that skips TLS, which a
// client alone, or a byte added on the path, cannot turn on.
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <string>

#include "gcr/unique_fd.h"
#include "net_handshake.h"

using namespace gcr::gcrd;
using gcr::UniqueFd;

namespace {

using Clock = std::chrono::steady_clock;

struct Outcome {
  gcr::Result<SessionKey> client;
  gcr::Result<TokenProven> server;
};

Outcome shake(const NetKey& client_key, const PeerKeys& server_keys, bool client_plaintext,
              bool server_allows_plaintext) {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  UniqueFd c(sv[0]), s(sv[1]);
  auto server = std::async(std::launch::async, [&] {
    auto r =
        check_token_proof(s.get(), server_keys, std::chrono::seconds(10), server_allows_plaintext);
    ::shutdown(s.get(), SHUT_RDWR);  // a refused client reads the end, not a hang
    return r;
  });
  auto client = prove_token(c.get(), client_key, "request", Clock::now() + std::chrono::seconds(10),
                            client_plaintext);
  ::shutdown(c.get(), SHUT_RDWR);
  return {std::move(client), server.get()};
}

const std::string kA(40, 'a'), kB(40, 'b');

PeerKeys peers() {
  auto keys = parse_peer_keys("peer alpha " + kA + " allow-uids=1000\npeer beta " + kB + "\n", "f");
  REQUIRE(keys);
  return *keys;
}

}  // namespace

TEST_CASE("a named key proves itself, and both sides derive the same session key") {
  PeerKeys keys = peers();
  auto o = shake(NetKey{"alpha", kA, std::nullopt}, keys, false, false);
  REQUIRE(o.client);
  REQUIRE(o.server);
  CHECK(*o.client == o.server->key);
  REQUIRE(o.server->peer);
  CHECK(o.server->peer->name == "alpha");
  CHECK(o.server->peer->allow_uids == std::set<uid_t>{1000});
  CHECK_FALSE(o.server->plaintext);
}

TEST_CASE("another peer's secret under a name, or a name unknown, is a wrong token") {
  PeerKeys keys = peers();
  for (const NetKey& k : {NetKey{"alpha", kB, std::nullopt}, NetKey{"gamma", kA, std::nullopt},
                          NetKey{"", kA, std::nullopt}}) {
    INFO("key '" << k.name << "'");
    auto o = shake(k, keys, false, false);
    CHECK_FALSE(o.client);
    REQUIRE_FALSE(o.server);
    CHECK(o.client.error().message.find("wrong token") != std::string::npos);
  }
}

TEST_CASE("no TLS only when both ends ask for it") {
  PeerKeys keys = peers();
  const NetKey alpha{"alpha", kA, std::nullopt};
  auto refused = shake(alpha, keys, true, false);
  CHECK_FALSE(refused.server);
  REQUIRE_FALSE(refused.client);
  CHECK(refused.client.error().message.find("requires TLS") != std::string::npos);

  auto both = shake(alpha, keys, true, true);
  REQUIRE(both.server);
  REQUIRE(both.client);
  CHECK(both.server->plaintext);

  auto client_only_tls = shake(alpha, keys, false, true);  // the server allows, nobody asked
  REQUIRE(client_only_tls.server);
  CHECK_FALSE(client_only_tls.server->plaintext);
}

TEST_CASE("tls=0 added on the path fails the proofs instead of turning TLS off") {
  // The client asks for TLS; a relay rewrites its first line to ask for none.
  int a[2], b[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a) == 0);
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b) == 0);
  UniqueFd client_end(a[0]), relay_client(a[1]), relay_server(b[0]), server_end(b[1]);
  PeerKeys keys = peers();
  auto server = std::async(std::launch::async, [&] {
    auto r = check_token_proof(server_end.get(), keys, std::chrono::seconds(10), true);
    ::shutdown(server_end.get(), SHUT_RDWR);
    return r;
  });
  auto relay = std::async(std::launch::async, [&] {
    std::string line;
    char ch;
    while (::read(relay_client.get(), &ch, 1) == 1 && ch != '\n') line += ch;
    line += " tls=0\n";
    (void)!::write(relay_server.get(), line.data(), line.size());
    char buf[4096];  // the rest, both ways, unchanged, until both hang up
    for (bool open = true; open;) {
      open = false;
      for (auto [from, to] : {std::pair{relay_server.get(), relay_client.get()},
                              std::pair{relay_client.get(), relay_server.get()}}) {
        ssize_t n = ::recv(from, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) (void)!::write(to, buf, static_cast<std::size_t>(n));
        if (n != 0) open = true;
      }
      if (open) ::usleep(1000);
    }
    ::shutdown(relay_client.get(), SHUT_RDWR);
    ::shutdown(relay_server.get(), SHUT_RDWR);
  });
  auto client = prove_token(client_end.get(), NetKey{"alpha", kA, std::nullopt}, "request",
                            Clock::now() + std::chrono::seconds(10), false);
  ::shutdown(client_end.get(), SHUT_RDWR);
  CHECK_FALSE(client);  // the server's proof signs a session without TLS: not the one asked for
  auto s = server.get();
  CHECK_FALSE(s);
  relay.get();
}
