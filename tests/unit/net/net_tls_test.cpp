// The encrypted channel of gcrd-net/3 (Note [An encrypted channel] in gcrd-net/net_tls.h): two
// ends of a loopback TCP connection each start TLS with a session key, and their plain ends carry
// bytes both ways, exactly; a wrong key, a changed byte on the wire, or a peer that hangs up ends
// the channel instead of delivering anything false.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gcr/unique_fd.h"
#include "net_tls.h"

using gcr::UniqueFd;
using gcr::gcrd::SessionKey;
using gcr::gcrd::start_tls;
using gcr::gcrd::TlsRole;

namespace {

using Clock = std::chrono::steady_clock;

// A connected loopback TCP pair (client, server).
std::pair<UniqueFd, UniqueFd> tcp_pair() {
  UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(listener);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(listener.get(), 1) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&a), &len) == 0);
  UniqueFd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(::connect(client.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  UniqueFd server(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  REQUIRE(server);
  return {std::move(client), std::move(server)};
}

SessionKey key_of(unsigned char fill) {
  SessionKey k{};
  k.fill(fill);
  return k;
}

// Both sides' handshakes at once; the plain ends, or the errors.
std::pair<gcr::Result<UniqueFd>, gcr::Result<UniqueFd>> both(UniqueFd c, UniqueFd s, SessionKey kc,
                                                             SessionKey ks) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  auto server = std::async(std::launch::async,
                           [&] { return start_tls(std::move(s), TlsRole::server, ks, deadline); });
  auto client = start_tls(std::move(c), TlsRole::client, kc, deadline);
  return {std::move(client), server.get()};
}

void write_all(int fd, const std::vector<char>& data) {
  for (std::size_t done = 0; done < data.size();) {
    ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    REQUIRE(n > 0);
    done += static_cast<std::size_t>(n);
  }
}

// Everything until end of file (or an error: then what came before it).
std::vector<char> read_all(int fd) {
  std::vector<char> out;
  char buf[65536];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.insert(out.end(), buf, buf + n);
  return out;
}

std::vector<char> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<char> v(n);
  for (char& c : v) c = static_cast<char>(rng());
  return v;
}

}  // namespace

TEST_CASE("both plain ends carry bytes exactly, both ways at once") {
  auto [c, s] = tcp_pair();
  auto [client, server] = both(std::move(c), std::move(s), key_of(7), key_of(7));
  REQUIRE(client);
  REQUIRE(server);
  const auto up = random_bytes(24u << 20, 1), down = random_bytes(9u << 20, 2);
  // Each side writes all, then closes its writing half; both read to the end meanwhile.
  auto server_side = std::async(std::launch::async, [&, fd = server->get()] {
    std::thread w([&] {
      write_all(fd, down);
      ::shutdown(fd, SHUT_WR);
    });
    auto got = read_all(fd);
    w.join();
    return got;
  });
  std::thread w([&, fd = client->get()] {
    write_all(fd, up);
    ::shutdown(fd, SHUT_WR);
  });
  auto got_down = read_all(client->get());
  w.join();
  auto got_up = server_side.get();
  CHECK(got_up == up);
  CHECK(got_down == down);
}

TEST_CASE("a request and its answer, then the client hangs up: the server reads end of file") {
  auto [c, s] = tcp_pair();
  auto [client, server] = both(std::move(c), std::move(s), key_of(3), key_of(3));
  REQUIRE((client && server));
  write_all(client->get(), std::vector<char>{'p', 'i', 'n', 'g', '\n'});
  char buf[16] = {};
  REQUIRE(::recv(server->get(), buf, sizeof buf, 0) == 5);
  CHECK(std::string(buf, 5) == "ping\n");
  write_all(server->get(), std::vector<char>{'o', 'k', '\n'});
  REQUIRE(::recv(client->get(), buf, sizeof buf, 0) == 3);
  client->reset();
  CHECK(read_all(server->get()).empty());
}

TEST_CASE("different keys: both handshakes fail, nothing is carried") {
  auto [c, s] = tcp_pair();
  auto [client, server] = both(std::move(c), std::move(s), key_of(1), key_of(2));
  CHECK_FALSE(client);
  CHECK_FALSE(server);
  if (!client) CHECK(client.error().message.find("TLS handshake") != std::string::npos);
}

TEST_CASE("a peer that never answers: the handshake ends at the deadline") {
  auto [c, s] = tcp_pair();
  const auto t0 = Clock::now();
  auto client = start_tls(std::move(c), TlsRole::client, key_of(5),
                          Clock::now() + std::chrono::milliseconds(300));
  CHECK_FALSE(client);
  CHECK(Clock::now() - t0 < std::chrono::seconds(10));
}

TEST_CASE("a byte changed on the wire ends the channel; nothing false is delivered") {
  // client <-> [middle: flips one byte of the first record after the handshake] <-> server
  auto [c, m1] = tcp_pair();
  auto [m2, s] = tcp_pair();
  std::atomic<bool> flip{false};
  std::thread middle([&, a = m1.get(), b = m2.get()] {
    pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    char buf[65536];
    for (bool flipped = false;;) {
      if (::poll(p, 2, 20000) <= 0) return;
      for (int i = 0; i < 2; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP))) continue;
        ssize_t n = ::recv(p[i].fd, buf, sizeof buf, 0);
        if (n <= 0) return;
        if (i == 0 && flip.load() && !flipped && n > 10) {
          buf[n - 5] ^= 0x40;  // inside the record's ciphertext or tag
          flipped = true;
        }
        (void)::send(p[1 - i].fd, buf, static_cast<std::size_t>(n), MSG_NOSIGNAL);
      }
    }
  });
  auto [client, server] = both(std::move(c), std::move(s), key_of(9), key_of(9));
  REQUIRE((client && server));
  flip = true;
  const std::vector<char> message(1000, 'x');
  write_all(client->get(), message);
  auto got = read_all(server->get());  // the server's relay fails the record and hangs up
  CHECK(got.empty());
  client->reset();
  server->reset();
  ::shutdown(m1.get(), SHUT_RDWR);
  ::shutdown(m2.get(), SHUT_RDWR);
  middle.join();
}
