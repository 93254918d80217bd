// The rendezvous sockets and credential rules (libgcr/control/rendezvous.cpp).
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include "control/rendezvous.h"

using namespace gcr;
using namespace gcr::control;
using namespace std::chrono_literals;

TEST_CASE("listen picks a fresh gcr-rv name each time", "[rendezvous]") {
  auto a = Rendezvous::listen();
  auto b = Rendezvous::listen();
  REQUIRE(a);
  REQUIRE(b);
  CHECK(is_rendezvous_name(a->name()));
  CHECK(a->name().rfind("gcr-rv-", 0) == 0);
  CHECK(a->name().size() == 7 + 32);
  CHECK(a->name() != b->name());
}

TEST_CASE("rendezvous names are checked before the process connects anywhere", "[rendezvous]") {
  CHECK_FALSE(is_rendezvous_name(""));
  CHECK_FALSE(is_rendezvous_name("gcr-rv-"));
  CHECK_FALSE(is_rendezvous_name("gcr-rv-0123456789abcdef0123456789ABCDEF"));
  CHECK_FALSE(is_rendezvous_name("/tmp/.X11-unix/X0"));
  CHECK(is_rendezvous_name("gcr-rv-0123456789abcdef0123456789abcdef"));
  auto c = connect_rendezvous("dbus-session");
  REQUIRE_FALSE(c);
  CHECK(c.error().code == Errc::invalid_argument);
  auto none = connect_rendezvous("gcr-rv-00000000000000000000000000000000");
  REQUIRE_FALSE(none);  // nobody listens there
}

TEST_CASE("accept_from takes the connection of the expected process", "[rendezvous]") {
  auto rv = Rendezvous::listen();
  REQUIRE(rv);
  auto conn = connect_rendezvous(rv->name());
  REQUIRE(conn);
  auto accepted = rv->accept_from(getpid(), deadline_after(2s), {});
  REQUIRE(accepted);
  auto cred = peer_cred(accepted->get());
  REQUIRE(cred);
  CHECK(cred->pid == getpid());
  CHECK(cred->uid == geteuid());
  auto other_side = peer_cred(conn->get());
  REQUIRE(other_side);
  CHECK(other_side->pid == getpid());
}

TEST_CASE("a connection from another process is dropped and the wait goes on", "[rendezvous]") {
  auto rv = Rendezvous::listen();
  REQUIRE(rv);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto c = connect_rendezvous(rv->name());
    _exit(c ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);  // the child did connect...
  auto accepted = rv->accept_from(getpid(), deadline_after(200ms), {});
  REQUIRE_FALSE(accepted);  // ...but it is not the process we asked for
  CHECK(accepted.error().code == Errc::timeout);
}

TEST_CASE("an error from still_waiting ends the wait", "[rendezvous]") {
  auto rv = Rendezvous::listen();
  REQUIRE(rv);
  int calls = 0;
  auto accepted = rv->accept_from(getpid(), deadline_after(10s), [&]() -> Status {
    if (++calls == 3) return make_error(Errc::not_found, "process 1 exited before answering");
    return ok();
  });
  REQUIRE_FALSE(accepted);
  CHECK(accepted.error().code == Errc::not_found);
  CHECK(calls == 3);
}

TEST_CASE("only root or the process's own uid may control it", "[rendezvous]") {
  CHECK(caller_allowed(0, 1000));
  CHECK(caller_allowed(1000, 1000));
  CHECK_FALSE(caller_allowed(1001, 1000));
  CHECK_FALSE(caller_allowed(65534, 0));
}
