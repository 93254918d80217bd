// Token files (Note [Per-peer keys] in gcrd-net/peer_keys.h): a bare token, or a key per peer
// with the users its processes may be; what is wrong is said with the line it is on.
#include <catch2/catch.hpp>
#include <string>

#include "peer_keys.h"

using gcr::gcrd::parse_peer_keys;

namespace {
const std::string kA(40, 'a'), kB(40, 'b');
}

TEST_CASE("a bare token is one key without a name, as gcrd-net/2 had it") {
  auto keys = parse_peer_keys("  " + kA + "  \n\n", "f");
  REQUIRE(keys);
  REQUIRE(keys->keys.size() == 1);
  CHECK(keys->keys[0].name.empty());
  CHECK(keys->keys[0].secret == kA);
  CHECK_FALSE(keys->keys[0].allow_uids);
  CHECK(keys->find("") == &keys->keys[0]);
  CHECK(keys->find("alpha") == nullptr);
}

TEST_CASE("peer lines: each key by its name, with its users") {
  auto keys = parse_peer_keys(
      "# the hosts that migrate here\n"
      "peer alpha " +
          kA +
          " allow-uids=0,1000-1001\n"
          "peer beta.2 " +
          kB +
          "\n"
          "peer gamma " +
          kB + kA + " allow-uids=none\n",
      "f");
  REQUIRE(keys);
  REQUIRE(keys->keys.size() == 3);
  const auto* alpha = keys->find("alpha");
  REQUIRE(alpha);
  CHECK(alpha->secret == kA);
  REQUIRE(alpha->allow_uids);
  CHECK(*alpha->allow_uids == std::set<uid_t>{0, 1000, 1001});
  REQUIRE(keys->find("beta.2"));
  CHECK_FALSE(keys->find("beta.2")->allow_uids);  // gcrd's --allow-uids then
  REQUIRE(keys->find("gamma"));
  CHECK(keys->find("gamma")->allow_uids == std::set<uid_t>{});
  CHECK(keys->find("") == nullptr);  // no bare token: a client must name its key
}

TEST_CASE("what is wrong in a token file is refused, naming the line") {
  auto refused = [](const std::string& text, const std::string& words) {
    auto keys = parse_peer_keys(text, "token file F");
    INFO(text);
    REQUIRE_FALSE(keys);
    CHECK_THAT(keys.error().message, Catch::Contains(words));
  };
  refused("", "holds no key");
  refused("# only a comment\n", "holds no key");
  refused("short\n", "fewer than 32");
  refused("peer alpha short\n", "line 1");
  refused("peer al/pha " + kA + "\n", "a peer's name");
  refused("peer alpha " + kA + "\npeer alpha " + kB + "\n", "named twice");
  refused(kA + "\npeer alpha " + kB + "\n", "do not mix");
  refused("peer alpha " + kA + "\n" + kB + "\n", "do not mix");
  refused("peer alpha " + kA + " allow-uids=x\n", "allow-uids");
  refused("peer alpha " + kA + " root=1\n", "unknown 'root=1'");
  refused(kA + " " + kB + "\n", "neither a bare token");
}
