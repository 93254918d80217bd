// gcrd as an object (daemon/daemon.h): started and stopped in-process on a socket of its
// own; its requests' fields typed and range-checked (gcrd_requests.h) before anything is done.
#include <catch2/catch.hpp>

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "clone_network.h"
#include "daemon.h"
#include "gcr/unique_fd.h"
#include "gcrd_client.h"
#include "gcrd_requests.h"
#include "scratch_dir.h"

using namespace gcr;
using namespace gcr::gcrd;
namespace fs = std::filesystem;

namespace {

// A Daemon serving a socket in a temporary directory, on a thread of its own.
class RunningDaemon {
 public:
  RunningDaemon() {
    DaemonOptions o;
    o.socket_path = dir_ / "gcrd.sock";
    o.warm_up = false;
    o.drain_limit = std::chrono::seconds(5);
    UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    REQUIRE(o.socket_path.native().size() < sizeof addr.sun_path);  // a long $TMPDIR does not fit
    std::strcpy(addr.sun_path, o.socket_path.c_str());
    REQUIRE(::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(listener.get(), 8) == 0);
    daemon_ = std::make_unique<Daemon>(o);
    thread_ = std::thread(
        [this, l = std::move(listener)]() mutable { exit_code_ = daemon_->run(std::move(l)); });
  }
  ~RunningDaemon() { stop(); }
  int stop() {
    if (thread_.joinable()) {
      daemon_->stop();
      thread_.join();
    }
    return exit_code_;
  }
  fs::path socket() const { return dir_ / "gcrd.sock"; }
  Result<Fields> call(const std::string& verb, const Fields& fields = {}) {
    GCR_TRY_ASSIGN(int fd, connect_running(socket()));
    UniqueFd connection(fd);
    return gcrd::call(connection.get(), verb, fields, nullptr);
  }
  Daemon& daemon() { return *daemon_; }

 private:
  ScratchDir dir_;  // first: it outlives the daemon that serves a socket in it
  std::unique_ptr<Daemon> daemon_;
  std::thread thread_;
  int exit_code_ = -1;
};

}  // namespace

TEST_CASE("Daemon: started, served and stopped in-process") {
  RunningDaemon d;
  auto pong = d.call("ping");
  REQUIRE(pong);
  CHECK(pong->at("pid") == std::to_string(getpid()));
  auto unknown = d.call("frobnicate");
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().message.find("unknown request 'frobnicate'") != std::string::npos);
  // What gcrd is doing to which process (`gcr ps`): nothing yet, then what a checkpoint says.
  auto idle = d.call("work");
  REQUIRE(idle);
  CHECK(idle->empty());
  d.daemon().work().set(4242, {"checkpoint", "drain", "draining"});
  auto busy = d.call("work");
  REQUIRE(busy);
  CHECK(busy->at("pid.4242.state") == "draining");
  CHECK(busy->at("pid.4242.phase") == "drain");
  CHECK(d.stop() == 0);
  CHECK_FALSE(fs::exists(d.socket()));  // Note [gcrd stops cleanly]: its socket goes with it
  CHECK_FALSE(connect_running(d.socket()));
}

TEST_CASE("Daemon: a malformed field refuses the request before anything is done") {
  RunningDaemon d;
  struct Case {
    Fields fields;
    const char* says;
  };
  const Case cases[] = {
      {{{"pid", "12abc"}}, "request field pid: '12abc' is not a number"},
      {{{"pid", "-5"}}, "request field pid: -5 is outside 0"},
      {{{"pid", "99999999999999999999"}}, "request field pid"},
      {{{"pid", ""}}, "request field pid: missing"},
      {{{"pid", "100"}, {"timeout_ms", "5"}}, "request field timeout_ms: 5 is outside 100"},
      {{{"pid", "100"}, {"leave_running", "yes"}},
       "request field leave_running: 'yes' is not 0 or 1"},
      {{{"pid", "100"}, {"job_pids", "7,x"}}, "request field job_pids: 'x' is not a pid"},
      {{{"pid", "100"}, {"job_pids", "7,7"}}, "process 7 is named twice"},
      {{{"pid", "100"}, {"job_pids", "100"}}, "process 100 is named twice"},
      {{{"pid", "100"}, {"device_only", "1"}}, "device_only is for a --leave-running checkpoint"},
      {{{"pid", "100"}, {"hold", "1"}, {"leave_running", "1"}},
       "hold is for a checkpoint that stops"},
  };
  for (const Case& c : cases) {
    auto reply = d.call("checkpoint", c.fields);
    INFO(c.says);
    REQUIRE_FALSE(reply);
    CHECK(reply.error().code == Errc::invalid_argument);
    CHECK(reply.error().message.find(c.says) != std::string::npos);
  }
  auto restore = d.call("restore", {{"name", "x"}, {"device", "64"}});
  REQUIRE_FALSE(restore);
  CHECK(restore.error().message.find("request field device: 64 is outside 0 .. 63") !=
        std::string::npos);
}

TEST_CASE("Request fields: typed values") {
  Fields f{{"a", "42"}, {"b", "1"}, {"c", "0"}, {"list", "3,4,5"}, {"nl", "x\ny"}};
  RequestFields r(f);
  CHECK(**r.integer("a", 0, 100) == 42);
  CHECK_FALSE(r.integer("a", 0, 10));
  CHECK_FALSE(*r.integer("missing", 0, 10));
  CHECK(*r.flag("b"));
  CHECK_FALSE(*r.flag("c"));
  CHECK_FALSE(*r.flag("missing"));
  CHECK(*r.pids("list") == std::vector<pid_t>{3, 4, 5});
  CHECK_FALSE(r.text("nl"));
  CHECK(r.text("a", 1).error().message.find("longer than 1 bytes") != std::string::npos);
  auto restore = decode_restore({{"name", "n"}}, 1);
  REQUIRE_FALSE(restore);
  CHECK(restore.error().message.find("without an inherit.0 key") != std::string::npos);
}

// Note [A clone's network] (clone_network.h): a clone's request and network are checked before
// anything is made.
TEST_CASE("Clones: fields and networks refused by form") {
  CHECK_FALSE(decode_restore({{"name", "n"}, {"clone_address", "10.0.0.2/24"}}, 0));
  auto job = decode_restore({{"name", "n"}, {"clone", "1"}, {"job_part", "1"}}, 0);
  REQUIRE_FALSE(job);
  CHECK(job.error().message.find("not of a job's part") != std::string::npos);
  auto clone = decode_restore(
      {{"name", "n"}, {"clone", "1"}, {"clone_address", "10.0.0.2/24"}, {"clone_bridge", "br0"}},
      0);
  REQUIRE(clone);
  CHECK(clone->clone);
  CHECK(clone->clone_bridge == "br0");

  auto said = [](const CloneNetworkSpec& spec) {
    Status s = check_clone_network(spec);
    return s ? std::string() : s.error().message;
  };
  CHECK(said({}).empty());  // loopback only
  CHECK(said({"", "10.0.0.2/24", "", ""}).find("go together") != std::string::npos);
  CHECK(said({"", "10.0.0.2", "br0", ""}).find("A.B.C.D/N") != std::string::npos);
  CHECK(said({"", "10.0.0.2/33", "br0", ""}).find("A.B.C.D/N") != std::string::npos);
  CHECK(said({"", "10.0.0.256/24", "br0", ""}).find("A.B.C.D/N") != std::string::npos);
  CHECK(said({"", "10.0.0.2/24", "-x", ""}).find("interface name") != std::string::npos);
  CHECK(said({"", "10.0.0.2/24", "br0;rm", ""}).find("interface name") != std::string::npos);
  CHECK(said({"", "", "", "10.0.0.1"}).find("--gateway") != std::string::npos);
  CHECK(said({"", "10.0.0.2/24", "gcr-no-such-br", ""}).find("no bridge gcr-no-such-br") !=
        std::string::npos);
  CHECK(said({"/nonexistent/netns", "", "", ""}).find("no network namespace") != std::string::npos);
  CHECK(said({"/proc/self/ns/net", "10.0.0.2/24", "br0", ""}).find("alone") != std::string::npos);
  CHECK(said({"/proc/self/ns/net", "", "", ""}).empty());
}

TEST_CASE("LogBudget: so many lines a minute, then a count of those left out") {
  LogBudget budget(2);
  const auto t0 = LogBudget::Clock::time_point{} + std::chrono::hours(1);
  CHECK(budget.admit("a", t0) == std::optional<std::string>("a"));
  CHECK(budget.admit("b", t0 + std::chrono::seconds(1)) == std::optional<std::string>("b"));
  for (int i = 0; i < 1000; ++i) CHECK_FALSE(budget.admit("flood", t0 + std::chrono::seconds(2)));
  CHECK_FALSE(budget.admit("c", t0 + std::chrono::seconds(59)));
  CHECK(budget.admit("d", t0 + std::chrono::seconds(61)) ==
        std::optional<std::string>("d (and 1001 more like it not logged)"));
  CHECK(budget.admit("e", t0 + std::chrono::seconds(62)) == std::optional<std::string>("e"));
}
