// The control channel inside the interposer checks who is calling (SO_PEERCRED): only root or
// the process's owner may control it. Reaching the interposer's check needs a caller that holds
// the mailbox but runs as another uid: root opens it and hands it to a child that drops to
// nobody (65534).
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

#include "common.h"

namespace ipt {
namespace {

TEST_CASE("the interposer refuses a control client running as another uid", "[peercred]") {
  if (geteuid() != 0) {
    std::printf("peer credentials: skipped, needs root to run a client as another uid\n");
    return;
  }
  Child target = Child::mode({"wait"}, gcr_env());
  REQUIRE(target.read_until("ready", 30000));

  auto mailbox = control::open_mailbox(target.pid());
  REQUIRE(mailbox);
  int fd = mailbox->get();
  REQUIRE(fcntl(fd, F_SETFD, 0) == 0);  // inherited by the client below
  Child intruder = Child::mode(
      {"connect-as", "65534", std::to_string(target.pid()), std::to_string(fd)}, plain_env());
  mailbox->reset();
  std::vector<std::string> lines = intruder.read_all(30000);
  std::string all;
  for (auto& l : lines) all += l + "\n";
  INFO(all);
  CHECK(intruder.wait() == 0);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == "uid 65534");
  // Through the mailbox it was handed, the interposer itself turns it away...
  CHECK(lines[1].rfind("mailbox refused permission_denied", 0) == 0);
  // ...and on its own it cannot even find the mailbox.
  CHECK(lines[2].rfind("pid refused permission_denied", 0) == 0);

  // The process's owner still gets in: the refusal did not wedge the agent thread.
  control::Client owner = connect(target.pid());
  auto status = owner.status();
  REQUIRE(status);
  CHECK(status->state == control::ProcessState::running);
  REQUIRE(owner.close());
  target.send("exit");
  CHECK(describe_status(target.wait()) == "exit 0");
}

}  // namespace
}  // namespace ipt
