// bench_net_tls: what gcrd-net/3's encryption costs a connection's throughput (Note [An encrypted
// channel] in gcrd-net/net_tls.h), against plain TCP measured in the same run: one direction,
// loopback, SIZE bytes each way through (a) a TCP pair and (b) the same through start_tls on both
// ends (TLS 1.3, AES-128-GCM, a relay thread per end), alternating, the median of each printed
// with their ratio. Loopback is the worst case for the relay: on a real link the wire, not the
// CPU, is the limit. Also the setup of a connection: TCP connect + accept against the same plus
// both ends' TLS handshakes (an X25519 exchange, the key schedule), median over --connections.
//
//   build/bench/bench_net_tls [--size 1G] [--reps 5] [--connections 200] [--json FILE]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "gcr/unique_fd.h"
#include "net_tls.h"

namespace {

using Clock = std::chrono::steady_clock;
using gcr::UniqueFd;

std::pair<UniqueFd, UniqueFd> tcp_pair() {
  UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(listener.get(), 1) != 0 ||
      ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
    std::exit((std::perror("listen"), 1));
  UniqueFd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (::connect(client.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    std::exit((std::perror("connect"), 1));
  UniqueFd server(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  int one = 1;
  ::setsockopt(client.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return {std::move(client), std::move(server)};
}

std::pair<UniqueFd, UniqueFd> tls_pair() {
  auto [c, s] = tcp_pair();
  gcr::gcrd::SessionKey key{};
  key.fill(0x5a);
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  auto server = std::async(std::launch::async, [&, s = std::move(s)]() mutable {
    return gcr::gcrd::start_tls(std::move(s), gcr::gcrd::TlsRole::server, key, deadline);
  });
  auto client = gcr::gcrd::start_tls(std::move(c), gcr::gcrd::TlsRole::client, key, deadline);
  auto srv = server.get();
  if (!client || !srv) std::exit((std::fprintf(stderr, "TLS handshake failed\n"), 1));
  return {std::move(*client), std::move(*srv)};
}

// Seconds to send `size` bytes from one end and read them all at the other.
double transfer(std::pair<UniqueFd, UniqueFd> ends, std::uint64_t size) {
  std::vector<char> buf(1u << 20, 'g');
  const auto t0 = Clock::now();
  std::thread writer([&, fd = ends.first.get()] {
    for (std::uint64_t left = size; left;) {
      ssize_t n = ::send(fd, buf.data(), std::min<std::uint64_t>(left, buf.size()), MSG_NOSIGNAL);
      if (n <= 0) return;
      left -= static_cast<std::uint64_t>(n);
    }
    ::shutdown(fd, SHUT_WR);
  });
  std::vector<char> in(1u << 20);
  std::uint64_t got = 0;
  for (ssize_t n; (n = ::recv(ends.second.get(), in.data(), in.size(), 0)) > 0;) got += n;
  writer.join();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (got != size)
    std::exit((std::fprintf(stderr, "short transfer: %llu\n", (unsigned long long)got), 1));
  return s;
}

// Microseconds to set up one connection, plain or with both TLS handshakes (and the relays).
double setup_us(bool tls) {
  const auto t0 = Clock::now();
  auto ends = tls ? tls_pair() : tcp_pair();
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  return us;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gcrd-net/3's TLS channel against plain TCP, loopback, same run"};
  std::string size_text = "1G";
  int reps = 5;
  int connections = 200;
  std::string json;
  app.add_option("--size", size_text, "bytes per transfer (K, M, G suffixes)");
  app.add_option("--reps", reps, "transfers of each kind, alternating")->check(CLI::PositiveNumber);
  app.add_option("--connections", connections, "connections set up of each kind, alternating")
      ->check(CLI::PositiveNumber);
  app.add_option("--json", json,
                 "write the results here (default bench/results/net-tls-<time>.json)");
  CLI11_PARSE(app, argc, argv);
  std::uint64_t size = std::stoull(size_text);
  switch (size_text.back()) {
    case 'K':
      size <<= 10;
      break;
    case 'M':
      size <<= 20;
      break;
    case 'G':
      size <<= 30;
      break;
    default:
      break;
  }
  std::vector<double> plain, tls;
  for (int i = 0; i < reps; ++i) {
    plain.push_back(transfer(tcp_pair(), size));
    tls.push_back(transfer(tls_pair(), size));
  }
  std::vector<double> setup_plain, setup_tls;
  for (int i = 0; i < connections; ++i) {
    setup_plain.push_back(setup_us(false));
    setup_tls.push_back(setup_us(true));
  }
  const double gib = static_cast<double>(size) / (1ull << 30);
  const double p = gib / median(plain), t = gib / median(tls);
  std::printf("one direction, loopback, %s per transfer, median of %d (GiB/s):\n",
              size_text.c_str(), reps);
  std::printf("  plain TCP             %6.2f\n", p);
  std::printf("  gcrd-net/3 TLS relay  %6.2f\n", t);
  std::printf("  TLS / plain: %.2fx\n", t / p);
  const double sp = median(setup_plain), st = median(setup_tls);
  std::printf("setting up a connection, median of %d (us): plain %.0f, with TLS %.0f (+%.0f)\n",
              connections, sp, st, st - sp);
  if (json.empty()) {
    char stamp[32];
    std::time_t now = std::time(nullptr);
    std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H%M%S", std::gmtime(&now));
    json = std::string(GCR_BENCH_RESULTS_DIR) + "/net-tls-" + stamp + ".json";
  }
  std::ofstream out(json);
  out << "{\"bench\": \"net_tls\", \"size_bytes\": " << size << ", \"reps\": " << reps
      << ", \"plain_gib_s\": " << p << ", \"tls_gib_s\": " << t << ", \"ratio\": " << t / p
      << ", \"connections\": " << connections << ", \"setup_plain_us\": " << sp
      << ", \"setup_tls_us\": " << st << ", \"cpus\": " << std::thread::hardware_concurrency()
      << "}\n";
  std::printf("wrote %s\n", json.c_str());
  return 0;
}
