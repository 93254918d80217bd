// Which TCP connections a job carries (Note [TCP within a job] in daemon/job_tcp.h), and the META
// that records them and a job's parts.
#include <catch2/catch.hpp>

#include "job_serve.h"
#include "job_tcp.h"

using namespace gcr;
using namespace gcr::gcrd;

namespace {

criu::OpenFile tcp(pid_t pid, int fd, const std::string& detail, bool external = true) {
  criu::OpenFile f;
  f.pid = pid;
  f.fd = fd;
  f.kind = criu::FileKind::tcp_socket;
  f.detail = detail;
  f.external = external;
  return f;
}

}  // namespace

TEST_CASE("a connection both of whose ends the job holds is carried, once") {
  std::vector<criu::OpenFile> a{tcp(10, 3, "10.0.0.1:5000 -> 10.0.0.1:41000"),
                                tcp(10, 4, "10.0.0.1:6000 -> 10.9.9.9:80")};
  std::vector<criu::OpenFile> b{tcp(20, 5, "10.0.0.1:41000 -> 10.0.0.1:5000"),
                                tcp(21, 5, "10.0.0.1:41000 -> 10.0.0.1:5000")};  // forked: same
  CarriedTcp c = carry_tcp_within({&a, &b});
  REQUIRE(c.connections.size() == 1);
  CHECK(c.connections[0].local.text() == "10.0.0.1:5000");
  CHECK(c.connections[0].remote.text() == "10.0.0.1:41000");
  CHECK(c.ends.size() == 3);
  CHECK_FALSE(a[0].external);
  CHECK(a[1].external);  // to outside: still refused
  CHECK_FALSE(b[0].external);
  CHECK_FALSE(b[1].external);
}

TEST_CASE("IPv6 and malformed details are never carried") {
  std::vector<criu::OpenFile> a{
      tcp(1, 3, "[00000000000000000000000001000000]:5 -> [00000000000000000000000001000000]:6"),
      tcp(1, 4, "[00000000000000000000000001000000]:6 -> [00000000000000000000000001000000]:5"),
      tcp(1, 5, "garbage")};
  CarriedTcp c = carry_tcp_within({&a});
  CHECK(c.empty());
  CHECK(a[0].external);
  CHECK(outward_tcp({&a}).empty());
}

TEST_CASE("the far ends another host holds: outward, then carried as listed") {
  std::vector<criu::OpenFile> a{tcp(10, 3, "10.0.0.1:5000 -> 10.0.0.2:41000"),
                                tcp(10, 4, "10.0.0.1:5001 -> 10.0.0.3:42000")};
  auto out = outward_tcp({&a});
  REQUIRE(out.size() == 2);
  CarriedTcp into;
  carry_listed({&a}, {out[0]}, into);
  CHECK(into.connections.size() == 1);
  CHECK(into.ends.size() == 1);
  CHECK_FALSE(a[0].external);
  CHECK(a[1].external);
}

TEST_CASE("META job_tcp round-trips and refuses what is not IPv4") {
  std::vector<TcpConnection> c{
      {*parse_tcp_address("10.0.0.1:5000"), *parse_tcp_address("10.0.0.2:6")}};
  auto back = decode_job_tcp(encode_job_tcp(c));
  REQUIRE(back);
  REQUIRE(back->size() == 1);
  CHECK((*back)[0].remote.text() == "10.0.0.2:6");
  CHECK_FALSE(decode_job_tcp("10.0.0.1:5000\n"));
  CHECK_FALSE(decode_job_tcp("10.0.0.1:5000 [::1]:6\n"));
  CHECK_FALSE(parse_tcp_address("10.0.0.256:1"));
  CHECK_FALSE(parse_tcp_address("10.0.0.1:0"));
  CHECK_FALSE(parse_tcp_address("10.0.0.1:70000"));
}

TEST_CASE("META job_parts round-trips and refuses a malformed line") {
  std::vector<JobPart> parts{{"10.0.0.2:7070", std::string(32, 'a'), {4101, 4102}}};
  auto back = decode_job_parts(encode_job_parts(parts));
  REQUIRE(back);
  REQUIRE(back->size() == 1);
  CHECK((*back)[0].address == "10.0.0.2:7070");
  CHECK((*back)[0].pids == std::vector<pid_t>{4101, 4102});
  CHECK_FALSE(decode_job_parts("10.0.0.2:7070 abc 1\n"));
  CHECK_FALSE(decode_job_parts("10.0.0.2:7070 " + std::string(32, 'a') + " -1\n"));
  CHECK_FALSE(decode_job_parts("10.0.0.2:7070 " + std::string(32, 'a') + "\n"));
  CHECK_FALSE(decode_job_parts("10.0.0.2:7070 " + std::string(32, 'a') + " 12,x\n"));
}

TEST_CASE("Comma lists: pids and holders") {
  CHECK(pid_list({1, 22, 333}) == "1,22,333");
  CHECK(*parse_pid_list("1,22,333") == std::vector<pid_t>{1, 22, 333});
  CHECK(*parse_pid_list(pid_list({7})) == std::vector<pid_t>{7});
  CHECK(*parse_pid_list(",5,,6,") == std::vector<pid_t>{5, 6});
  CHECK_FALSE(parse_pid_list(""));
  CHECK_FALSE(parse_pid_list("0"));
  CHECK_FALSE(parse_pid_list("3,-4"));
  CHECK_FALSE(parse_pid_list("3,4x"));
  CHECK_FALSE(parse_pid_list("99999999999"));
  CHECK(split_commas("a:1,b:2,,") == std::vector<std::string>{"a:1", "b:2"});
  CHECK(split_commas("").empty());
}
