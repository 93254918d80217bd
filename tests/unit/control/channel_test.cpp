// Framed messages and fd passing over a socketpair (libgcr/control/channel.cpp).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "control/channel.h"
#include "fake_handler.h"

using namespace gcr;
using namespace gcr::control;
using namespace std::chrono_literals;

namespace {

std::pair<Channel, Channel> channel_pair() {
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  return {Channel(UniqueFd(sv[0])), Channel(UniqueFd(sv[1]))};
}

UniqueFd memfd_with(const std::string& bytes) {
  UniqueFd fd(memfd_create("channel-test", MFD_CLOEXEC));
  REQUIRE(fd);
  REQUIRE(pwrite(fd.get(), bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
  return fd;
}

int open_fd_count() {
  int n = 0;
  for (int fd = 0; fd < 4096; ++fd)
    if (fcntl(fd, F_GETFD) >= 0) ++n;
  return n;
}

}  // namespace

TEST_CASE("an fd sent over a channel refers to the same file", "[channel]") {
  auto [a, b] = channel_pair();
  UniqueFd f1 = memfd_with("first file");
  UniqueFd f2 = memfd_with("second file");
  std::vector<std::uint8_t> payload{1, 2, 3};
  int fds[] = {f1.get(), f2.get()};
  REQUIRE(a.send(MsgType::unpark, payload, fds, deadline_after(1s)));

  auto m = b.recv(deadline_after(1s), kMaxFdsPerMessage);
  REQUIRE(m);
  CHECK(m->type == MsgType::unpark);
  CHECK(m->payload == payload);
  REQUIRE(m->fds.size() == 2);
  CHECK(m->fds[0].get() != f1.get());
  CHECK(fcntl(m->fds[0].get(), F_GETFD) & FD_CLOEXEC);  // received close-on-exec

  // Write through the received fd, read through the original: one file.
  REQUIRE(pwrite(m->fds[1].get(), "SECOND", 6, 0) == 6);
  CHECK(testing::read_fd(f2.get(), 11) == "SECOND file");
  CHECK(testing::read_fd(m->fds[0].get(), 10) == "first file");
}

TEST_CASE("a large message with fds arrives whole while both sides wait for each other",
          "[channel]") {
  auto [a, b] = channel_pair();
  std::vector<std::uint8_t> payload(4u << 20);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::uint8_t>(i * 7);
  std::vector<UniqueFd> files;
  std::vector<int> fds;
  for (int i = 0; i < 250; ++i) {
    files.push_back(memfd_with("file " + std::to_string(i)));
    fds.push_back(files.back().get());
  }
  Status sent = ok();
  std::thread writer([&, &a = a] {
    sent = a.send(MsgType::parked, payload, fds, deadline_after(10s));
    if (sent) sent = a.send(MsgType::status, {}, {}, deadline_after(10s));
  });
  auto m = b.recv(deadline_after(10s), kMaxFdsPerMessage);
  auto next = b.recv(deadline_after(10s), 0);
  writer.join();
  REQUIRE(sent);
  REQUIRE(m);
  CHECK(m->payload == payload);
  REQUIRE(m->fds.size() == 250);
  CHECK(testing::read_fd(m->fds[249].get(), 8) == "file 249");
  REQUIRE(next);
  CHECK(next->type == MsgType::status);
  CHECK(next->fds.empty());
}

TEST_CASE("recv gives up at its deadline when nothing arrives", "[channel]") {
  auto [a, b] = channel_pair();
  auto m = b.recv(deadline_after(50ms), 0);
  REQUIRE_FALSE(m);
  CHECK(m.error().code == Errc::timeout);
}

TEST_CASE("a peer that closes reads as peer closed, also in the middle of a message", "[channel]") {
  {
    auto [a, b] = channel_pair();
    a.close();
    auto m = b.recv(deadline_after(1s), 0);
    REQUIRE_FALSE(m);
    CHECK(is_peer_closed(m.error()));
  }
  {
    auto [a, b] = channel_pair();
    auto h = encode_header(MsgType::status_reply, 100);
    REQUIRE(write(a.fd(), h.data(), h.size()) == static_cast<ssize_t>(h.size()));
    a.close();
    auto m = b.recv(deadline_after(1s), 0);
    REQUIRE_FALSE(m);
    CHECK(is_peer_closed(m.error()));
    CHECK(m.error().message.find("middle") != std::string::npos);
  }
  {
    auto [a, b] = channel_pair();
    b.close();
    Status s = a.send(MsgType::status, {}, {}, deadline_after(1s));  // no SIGPIPE either
    REQUIRE_FALSE(s);
    CHECK(is_peer_closed(s.error()));
  }
}

TEST_CASE("fds beyond what the reader expects are refused and closed", "[channel]") {
  auto [a, b] = channel_pair();
  UniqueFd f = memfd_with("x");
  int before = open_fd_count();
  int fds[] = {f.get(), f.get(), f.get()};
  REQUIRE(a.send(MsgType::status, {}, fds, deadline_after(1s)));
  auto m = b.recv(deadline_after(1s), 0);
  REQUIRE_FALSE(m);
  CHECK(m.error().code == Errc::protocol);
  CHECK(m.error().message.find("3 fds") != std::string::npos);
  CHECK(open_fd_count() == before);  // nothing leaked
}

TEST_CASE("send refuses more fds than a message may carry, and invalid fds", "[channel]") {
  auto [a, b] = channel_pair();
  std::vector<int> fds(kMaxFdsPerMessage + 1, 0);
  Status s = a.send(MsgType::unpark, {}, fds, deadline_after(1s));
  REQUIRE_FALSE(s);
  CHECK(s.error().code == Errc::invalid_argument);
  int bad[] = {-1};
  CHECK_FALSE(a.send(MsgType::unpark, {}, bad, deadline_after(1s)));
}

TEST_CASE("a message of a newer major version is refused naming both versions", "[channel]") {
  auto [a, b] = channel_pair();
  auto h = encode_header(MsgType::status, 0);
  h[4] = 3;
  REQUIRE(write(a.fd(), h.data(), h.size()) == static_cast<ssize_t>(h.size()));
  auto m = b.recv(deadline_after(1s), 0);
  REQUIRE_FALSE(m);
  CHECK(m.error().code == Errc::unsupported);
  CHECK(m.error().message.find("3." + std::to_string(kProtocolMinor)) != std::string::npos);
  CHECK(m.error().message.find("1." + std::to_string(kProtocolMinor)) != std::string::npos);
}

TEST_CASE("wait_closed returns once the peer has closed, and refuses stray data", "[channel]") {
  {
    auto [a, b] = channel_pair();
    std::thread closer([&a = a] {
      std::this_thread::sleep_for(20ms);
      a.close();
    });
    CHECK(b.wait_closed(deadline_after(5s)));
    closer.join();
  }
  {
    auto [a, b] = channel_pair();
    REQUIRE(a.send(MsgType::status, {}, {}, deadline_after(1s)));
    auto s = b.wait_closed(deadline_after(1s));
    REQUIRE_FALSE(s);
    CHECK(s.error().code == Errc::protocol);
  }
  {
    auto [a, b] = channel_pair();
    auto s = b.wait_closed(deadline_after(30ms));
    REQUIRE_FALSE(s);
    CHECK(s.error().code == Errc::timeout);
  }
}
