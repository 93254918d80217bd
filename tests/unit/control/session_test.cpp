// The server's side of a conversation (libgcr/control/session.cpp), driven message by message
// over a socketpair: dispatch, error replies, and Note [Nobody left behind].
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "control/session.h"
#include "fake_handler.h"

using namespace gcr;
using namespace gcr::control;
using namespace std::chrono_literals;
using gcr::control::testing::FakeHandler;

namespace {

// serve_session on a thread, and the caller's end of the connection.
class SessionRig {
 public:
  explicit SessionRig(int regions) : handler(regions) {
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    caller = Channel(UniqueFd(sv[0]));
    server_ = Channel(UniqueFd(sv[1]));
    options_.software = "session test";
    options_.io_timeout = 2s;
    options_.server_pid = 77;
    options_.server_uid = 1234;
    thread_ = std::thread([this] {
      serve_session(server_, handler, options_);
      server_.close();  // as server.cpp does after the session
    });
  }
  ~SessionRig() {
    caller.close();
    if (thread_.joinable()) thread_.join();
  }
  void join() { thread_.join(); }

  Message recv(std::size_t max_fds = 0) {
    auto m = caller.recv(deadline_after(5s), max_fds);
    INFO((m ? std::string("ok") : m.error().message));
    REQUIRE(m);
    return std::move(*m);
  }
  void send(MsgType type, std::span<const std::uint8_t> payload = {},
            std::span<const int> fds = {}) {
    REQUIRE(caller.send(type, payload, fds, deadline_after(5s)));
  }
  Error recv_error() {
    Message m = recv();
    REQUIRE(m.type == MsgType::error);
    auto e = decode_error(m.payload);
    REQUIRE(e);
    return e->error;
  }
  void recv_ok(MsgType request) {
    Message m = recv();
    if (m.type == MsgType::error) FAIL(decode_error(m.payload)->error.message);
    REQUIRE(m.type == MsgType::ok);
    REQUIRE(*decode_ok(m.payload) == request);
  }
  Hello hello() {
    Message m = recv();
    REQUIRE(m.type == MsgType::hello);
    auto h = decode_hello(m.payload);
    REQUIRE(h);
    return *h;
  }

  FakeHandler handler;
  Channel caller;

 private:
  Channel server_;
  SessionOptions options_;
  std::thread thread_;
};

// The parked batches after a park request, as (records, fds).
std::vector<ParkedRegion> receive_park(SessionRig& rig) {
  std::vector<ParkedRegion> out;
  std::uint32_t total = 0;
  do {
    Message m = rig.recv(kMaxFdsPerMessage);
    REQUIRE(m.type == MsgType::parked);
    auto b = decode_region_batch(MsgType::parked, m.payload);
    REQUIRE(b);
    total = b->total;
    REQUIRE(b->first == out.size());
    REQUIRE(m.fds.size() == b->records.size());
    for (std::size_t i = 0; i < b->records.size(); ++i)
      out.push_back(ParkedRegion{b->records[i], std::move(m.fds[i])});
  } while (out.size() < total);
  return out;
}

}  // namespace

TEST_CASE("the server greets first with its pid, state and software", "[session]") {
  SessionRig rig(2);
  Hello h = rig.hello();
  CHECK(h.pid == 77);
  CHECK(h.uid == 1234);
  CHECK(h.state == ProcessState::running);
  CHECK(h.software == "session test");
  rig.send(MsgType::bye);
  rig.recv_ok(MsgType::bye);
  CHECK(rig.caller.wait_closed(deadline_after(5s)));
}

TEST_CASE("an unknown request gets an unsupported error and the session goes on", "[session]") {
  SessionRig rig(1);
  rig.hello();
  rig.send(static_cast<MsgType>(500));
  Error e = rig.recv_error();
  CHECK(e.code == Errc::unsupported);
  CHECK(e.message.find("type 500") != std::string::npos);
  rig.send(MsgType::status);
  Message m = rig.recv();
  CHECK(m.type == MsgType::status_reply);
}

TEST_CASE("a malformed request gets a protocol error and the session goes on", "[session]") {
  SessionRig rig(1);
  rig.hello();
  std::vector<std::uint8_t> junk{1, 2, 3};
  rig.send(MsgType::quiesce, junk);
  CHECK(rig.recv_error().code == Errc::protocol);
  rig.send(MsgType::status, junk);
  CHECK(rig.recv_error().code == Errc::protocol);
  rig.send(MsgType::hello);
  CHECK(rig.recv_error().message.find("not a request") != std::string::npos);
  rig.send(MsgType::park_done);
  CHECK(rig.recv_error().message.find("without a park") != std::string::npos);
  rig.send(MsgType::regions);
  CHECK(rig.recv().type == MsgType::regions_reply);
}

TEST_CASE("fds on a request other than unpark are refused and closed", "[session]") {
  SessionRig rig(1);
  rig.hello();
  int fds[] = {STDIN_FILENO};
  rig.send(MsgType::status, {}, fds);
  Error e = rig.recv_error();
  CHECK(e.code == Errc::protocol);
  CHECK(e.message.find("carried fds") != std::string::npos);
}

TEST_CASE("a confirmed park leaves the process holding no region", "[session]") {
  SessionRig rig(3);
  rig.hello();
  rig.send(MsgType::quiesce, encode_quiesce(1000));
  rig.recv_ok(MsgType::quiesce);
  rig.send(MsgType::park);
  auto parked = receive_park(rig);
  REQUIRE(parked.size() == 3);
  CHECK(testing::read_fd(parked[2].fd.get(), 9) == "region-2;");
  rig.send(MsgType::park_done);
  rig.recv_ok(MsgType::park_done);
  CHECK(rig.handler.fds_held() == 0);
  CHECK(rig.handler.state() == ProcessState::parked);
  rig.send(MsgType::bye);
  rig.recv_ok(MsgType::bye);
  rig.join();
  CHECK(rig.handler.state() == ProcessState::parked);  // parked outlives the session
  CHECK(rig.handler.unpark_calls() == 0);
}

TEST_CASE("a park the caller does not confirm is mapped back and the process resumed",
          "[session]") {
  SessionRig rig(260);  // two batches
  rig.hello();
  rig.send(MsgType::quiesce, encode_quiesce(1000));
  rig.recv_ok(MsgType::quiesce);
  rig.send(MsgType::park);
  auto parked = receive_park(rig);
  REQUIRE(parked.size() == 260);
  parked.clear();      // this caller drops its copies...
  rig.caller.close();  // ...and goes away without park_done
  rig.join();
  CHECK(rig.handler.unpark_calls() == 1);
  CHECK(rig.handler.fds_held() == 260);
  CHECK(rig.handler.state() == ProcessState::running);
}

TEST_CASE("a reply other than park_done is refused and the regions are mapped back", "[session]") {
  SessionRig rig(2);
  rig.hello();
  rig.send(MsgType::quiesce, encode_quiesce(1000));
  rig.recv_ok(MsgType::quiesce);
  rig.send(MsgType::park);
  auto parked = receive_park(rig);
  rig.send(MsgType::status);
  Error e = rig.recv_error();
  CHECK(e.code == Errc::protocol);
  CHECK(e.message.find("mapped its regions back") != std::string::npos);
  CHECK(rig.caller.wait_closed(deadline_after(5s)));  // and the server hung up
  rig.join();
  CHECK(rig.handler.fds_held() == 2);
  CHECK(rig.handler.state() == ProcessState::running);
}

TEST_CASE("a caller that leaves a quiesced process gets it resumed", "[session]") {
  SECTION("by going away") {
    SessionRig rig(1);
    rig.hello();
    rig.send(MsgType::quiesce, encode_quiesce(1000));
    rig.recv_ok(MsgType::quiesce);
    rig.caller.close();
    rig.join();
    CHECK(rig.handler.state() == ProcessState::running);
  }
  SECTION("by saying bye: resumed before the reply") {
    SessionRig rig(1);
    rig.hello();
    rig.send(MsgType::quiesce, encode_quiesce(1000));
    rig.recv_ok(MsgType::quiesce);
    rig.send(MsgType::bye);
    rig.recv_ok(MsgType::bye);
    CHECK(rig.handler.state() == ProcessState::running);
  }
}

TEST_CASE("unpark batches that disagree with their fds end the session", "[session]") {
  SessionRig rig(2);
  rig.hello();
  rig.send(MsgType::quiesce, encode_quiesce(1000));
  rig.recv_ok(MsgType::quiesce);
  rig.send(MsgType::park);
  auto parked = receive_park(rig);
  rig.send(MsgType::park_done);
  rig.recv_ok(MsgType::park_done);

  RegionBatch batch{2, 0, {parked[0].region, parked[1].region}};
  int one_fd[] = {parked[0].fd.get()};
  rig.send(MsgType::unpark, *encode_region_batch(batch), one_fd);
  Error e = rig.recv_error();
  CHECK(e.code == Errc::protocol);
  CHECK(e.message.find("2 records came with 1 fds") != std::string::npos);
  CHECK(rig.caller.wait_closed(deadline_after(5s)));
  rig.join();
  CHECK(rig.handler.state() == ProcessState::parked);  // nothing was given back
}

TEST_CASE("unpark in batches gives every region back", "[session]") {
  SessionRig rig(300);
  rig.hello();
  rig.send(MsgType::quiesce, encode_quiesce(1000));
  rig.recv_ok(MsgType::quiesce);
  rig.send(MsgType::park);
  auto parked = receive_park(rig);
  rig.send(MsgType::park_done);
  rig.recv_ok(MsgType::park_done);
  for (std::uint32_t first = 0; first < 300; first += 250) {
    RegionBatch batch{300, first, {}};
    std::vector<int> fds;
    for (std::uint32_t i = first; i < std::min<std::uint32_t>(300, first + 250); ++i) {
      batch.records.push_back(parked[i].region);
      fds.push_back(parked[i].fd.get());
    }
    rig.send(MsgType::unpark, *encode_region_batch(batch), fds);
  }
  rig.recv_ok(MsgType::unpark);
  CHECK(rig.handler.state() == ProcessState::quiesced);
  CHECK(rig.handler.fds_held() == 300);
  rig.send(MsgType::resume);
  rig.recv_ok(MsgType::resume);
}

TEST_CASE("a bad header ends the session with an error that names both versions", "[session]") {
  SessionRig rig(1);
  rig.hello();
  auto h = encode_header(MsgType::status, 0);
  h[4] = 2;
  REQUIRE(write(rig.caller.fd(), h.data(), h.size()) == static_cast<ssize_t>(h.size()));
  Error e = rig.recv_error();
  CHECK(e.code == Errc::unsupported);
  CHECK(e.message.find("2." + std::to_string(kProtocolMinor)) != std::string::npos);
  CHECK(rig.caller.wait_closed(deadline_after(5s)));
}
