// The meeting points of a job across hosts (Note [A job across hosts] in daemon/job_link.h): a
// coordinator and its parts over socketpairs, each part in a thread of its own.
#include <sys/socket.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gcrd_protocol.h"
#include "job_hosts.h"

using namespace gcr;
using namespace gcr::gcrd;
using namespace std::chrono_literals;

namespace {

TcpConnection conn(const char* local, const char* remote) {
  return {*parse_tcp_address(local), *parse_tcp_address(remote)};
}

// Two parts for a coordinator: parts[i].conn is the coordinator's end, `theirs[i]` the part's.
struct Parts {
  std::vector<RemotePart> parts;
  std::vector<UniqueFd> theirs;
  explicit Parts(std::size_t n, std::chrono::milliseconds idle = 5s) {
    for (std::size_t i = 0; i < n; ++i) {
      int sv[2];
      REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
      RemotePart p;
      p.address = "host" + std::to_string(i);
      p.conn = UniqueFd(sv[0]);
      p.wire = std::make_unique<JobWire>(sv[0], "host " + p.address, idle);
      parts.push_back(std::move(p));
      theirs.emplace_back(sv[1]);
    }
  }
};

// A part that meets the coordinator at every point, as a checkpoint would.
struct PartRun {
  std::vector<TcpConnection> outward, carried;
  std::uint64_t admitted = 0, target = 0;
  std::string id, name;
  std::string failed;  // the first error, if any
  int fd = -1;
  void run(int to) {
    fd = to;
    JobWire wire(fd, "the job's coordinator", 5s);
    PartLink link(wire);
    auto c = link.carried(outward);
    if (!c) return fail(c.error());
    carried = *c;
    auto t = link.cut_target(admitted);
    if (!t) return fail(t.error());
    target = *t;
    if (auto q = link.quiesced(); !q) return fail(q.error());
    if (auto d = link.dumped(); !d) return fail(d.error());
    auto n = link.prepared(id);
    if (!n) return fail(n.error());
    name = n->value_or("(aborted)");
    send_line(fd, "ok id=" + id);
  }
  void fail(const Error& e) {  // as gcrd ends a failed request
    failed = e.message;
    send_line(fd,
              "error " + std::to_string(static_cast<int>(e.code)) + " " + encode_value(e.message));
  }
};

}  // namespace

TEST_CASE("the parts meet the coordinator at every point and commit under the job's name") {
  Parts ps(2);
  CoordinatorLink link(ps.parts);
  PartRun a, b;
  a.outward = {conn("10.0.0.2:41000", "10.0.0.1:5000"), conn("10.0.0.2:42", "10.0.0.3:43")};
  a.admitted = 9;
  a.id = std::string(32, '1');
  b.outward = {conn("10.0.0.3:43", "10.0.0.2:42"), conn("10.0.0.3:44", "10.9.9.9:80")};
  b.admitted = 0;
  b.id = std::string(32, '2');
  std::thread ta([&] { a.run(ps.theirs[0].get()); });
  std::thread tb([&] { b.run(ps.theirs[1].get()); });
  auto mine = link.carried({conn("10.0.0.1:5000", "10.0.0.2:41000")});
  REQUIRE(mine);
  CHECK(mine->size() == 1);
  auto t = link.cut_target(5);
  REQUIRE(t);
  CHECK(*t == 9);
  REQUIRE(link.quiesced());
  REQUIRE(link.dumped());
  REQUIRE(link.prepared());
  CHECK(ps.parts[0].id == a.id);
  CHECK(ps.parts[1].id == b.id);
  REQUIRE(link.commit_all("job1"));
  ta.join();
  tb.join();
  CHECK(a.failed.empty());
  CHECK(b.failed.empty());
  CHECK(a.carried.size() == 2);
  REQUIRE(b.carried.size() == 1);  // the connection to outside the job is not carried
  CHECK(b.carried[0].remote.text() == "10.0.0.2:42");
  CHECK(a.target == 9);
  CHECK(b.target == 9);
  CHECK(a.name == "job1");
  CHECK(b.name == "job1");
}

TEST_CASE("a part that fails fails the coordinator, which aborts the others") {
  Parts ps(2);
  CoordinatorLink link(ps.parts);
  PartRun a;
  a.id = std::string(32, '1');
  std::thread ta([&] { a.run(ps.theirs[0].get()); });
  std::thread tb([&] {  // inspects, then fails before the cut
    JobWire wire(ps.theirs[1].get(), "the job's coordinator", 5s);
    PartLink part(wire);
    REQUIRE(part.carried({}));
    send_line(ps.theirs[1].get(), "error 9 " + encode_value("the cut was not reached"));
    ps.theirs[1].reset();  // its request is over
  });
  REQUIRE(link.carried({}));
  auto t = link.cut_target(1);
  REQUIRE_FALSE(t);
  CHECK(t.error().message.find("host host1") != std::string::npos);
  CHECK(t.error().message.find("the cut was not reached") != std::string::npos);
  link.abort_all();
  ta.join();
  tb.join();
  CHECK(a.failed.find("aborted by its coordinator") != std::string::npos);
}

TEST_CASE("a silent part is taken for gone after the idle limit") {
  Parts ps(1, 200ms);
  CoordinatorLink link(ps.parts);
  auto t0 = std::chrono::steady_clock::now();
  auto c = link.carried({});
  REQUIRE_FALSE(c);
  CHECK(c.error().code == Errc::timeout);
  CHECK(c.error().message.find("said nothing for 200 ms") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 >= 200ms);
}

TEST_CASE("a part whose coordinator goes away after it prepared is told so, not committed") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  UniqueFd coordinator(sv[0]), part_end(sv[1]);
  JobWire wire(part_end.get(), "the job's coordinator", 5s);
  PartLink part(wire);
  coordinator.reset();
  auto n = part.prepared(std::string(32, '3'));
  REQUIRE_FALSE(n);  // in doubt: neither commit nor abort
}

TEST_CASE("progress lines are signs of life, not answers") {
  Parts ps(1, 300ms);
  CoordinatorLink link(ps.parts);
  std::thread t([&] {
    for (int i = 0; i < 4; ++i) {
      std::this_thread::sleep_for(150ms);
      send_line(ps.theirs[0].get(), "progress " + encode_value("storing"));
    }
    send_line(ps.theirs[0].get(), "tcp c=");
  });
  auto c = link.carried({});  // 600 ms in all, never 300 ms silent
  t.join();
  REQUIRE(c);
}
