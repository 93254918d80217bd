// gcr/criu_creds.h: the credentials in CRIU's core images, and who a peer may run (Note [Who a
// peer may run]). The images are made here as CRIU writes them (images/core.proto, creds.proto).
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gcr/criu_creds.h"
#include "scratch_dir.h"

using namespace gcr;
using namespace gcr::criu;
namespace fs = std::filesystem;

namespace {

std::string varint(std::uint64_t v) {
  std::string out;
  do {
    unsigned char b = v & 0x7f;
    v >>= 7;
    out += static_cast<char>(v ? b | 0x80 : b);
  } while (v);
  return out;
}
std::string field(int n, std::uint64_t v) {
  return varint(static_cast<std::uint64_t>(n) << 3) + varint(v);
}
std::string nested(int n, const std::string& msg) {
  return varint((static_cast<std::uint64_t>(n) << 3) | 2) + varint(msg.size()) + msg;
}
std::string u32(std::uint32_t v) {
  return std::string(reinterpret_cast<const char*>(&v), 4);
}

struct Creds {
  std::uint32_t uid = 1000, gid = 1000;
  std::vector<std::uint32_t> cap_eff = {};  // not packed, as proto2 writes a repeated field
  std::vector<std::uint32_t> groups = {};
};

// core-TID.img: the magics, then core_entry { mtype = 1; thread_core = 5 { futex_rla = 1;
// creds = 10 {...} } }.
std::string core_image(const Creds& c) {
  std::string creds;
  for (int n = 1; n <= 8; ++n) creds += field(n, n % 2 ? c.uid : c.gid);
  for (std::uint32_t cap : c.cap_eff) creds += field(11, cap);
  creds += field(12, 0xffffffff);  // the bounding set says nothing of what it holds
  creds += field(13, 0);
  for (std::uint32_t g : c.groups) creds += field(14, g);
  const std::string thread_core = field(1, 0) + field(2, 0) + nested(10, creds);
  const std::string core = field(1, 1) + nested(5, thread_core);
  return u32(0x54564319) + u32(0x55053847) + u32(static_cast<std::uint32_t>(core.size())) + core;
}

struct Images : ScratchDir {
  void add(const std::string& name, const std::string& bytes) {
    fs::create_directories((path() / name).parent_path());
    std::ofstream(path() / name, std::ios::binary) << bytes;
  }
};

}  // namespace

TEST_CASE("the credentials of every thread, a job's trees included") {
  Images im;
  im.add("core-10.img", core_image({}));
  im.add("tree-20/core-21.img", core_image({.uid = 1001, .gid = 100, .groups = {100, 27}}));
  im.add("pagemap-10.img", "not a core image");
  auto creds = read_image_creds(im.path());
  REQUIRE(creds);
  REQUIRE(creds->size() == 2);
  for (const ThreadCreds& c : *creds) {
    if (c.image == "core-10.img") {
      CHECK(c.uids[0] == 1000);
      CHECK(c.uids[3] == 1000);
      CHECK(c.gids[1] == 1000);
      CHECK_FALSE(c.capabilities);
    } else {
      CHECK(c.image == "tree-20/core-21.img");
      CHECK(c.uids[2] == 1001);
      CHECK(c.groups == std::vector<std::uint32_t>{100, 27});
    }
  }
}

TEST_CASE("a peer runs only the users the operator allowed") {
  Images im;
  im.add("core-10.img", core_image({}));
  auto user = read_image_creds(im.path());
  REQUIRE(user);
  CHECK(check_peer_may_run(*user, {1000}));
  CHECK(check_peer_may_run(*user, *parse_uid_list("0,900-1100")));
  auto none = check_peer_may_run(*user, {});
  REQUIRE_FALSE(none);
  CHECK(none.error().code == Errc::permission_denied);
  CHECK(none.error().message.find("would run as uid 1000") != std::string::npos);

  Images root;
  root.add("core-1.img", core_image({.uid = 0, .gid = 0, .cap_eff = {0xffffffff, 0x1ff}}));
  auto r = read_image_creds(root.path());
  REQUIRE(r);
  CHECK((*r)[0].capabilities);
  CHECK_FALSE(check_peer_may_run(*r, {1000}));
  CHECK(check_peer_may_run(*r, {0}));

  Images caps;  // an allowed user that would hold capabilities, or be in group 0
  caps.add("core-2.img", core_image({.cap_eff = {1u << 21}}));
  caps.add("core-3.img", core_image({.groups = {0}}));
  auto c = read_image_creds(caps.path());
  REQUIRE(c);
  auto refused = check_peer_may_run(*c, {1000});
  REQUIRE_FALSE(refused);
  CHECK(check_peer_may_run(*c, {0, 1000}));
}

TEST_CASE("images that say nothing of who runs are refused") {
  Images empty;
  CHECK_FALSE(read_image_creds(empty.path()));
  Images bad;
  bad.add("core-1.img", u32(0x54564319) + u32(0x55053847) + u32(1000) + "cut");
  auto r = read_image_creds(bad.path());
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::corrupt_image);
  Images nocreds;
  const std::string core = field(1, 1);
  nocreds.add("core-1.img", u32(0x54564319) + u32(0x55053847) + u32(2) + core);
  CHECK_FALSE(read_image_creds(nocreds.path()));
}

TEST_CASE("uid lists") {
  CHECK(*parse_uid_list("0") == std::set<uid_t>{0});
  CHECK(parse_uid_list("1000-1002,5")->size() == 4);
  CHECK_FALSE(parse_uid_list(""));
  CHECK_FALSE(parse_uid_list("root"));
  CHECK_FALSE(parse_uid_list("5-3"));
  CHECK_FALSE(parse_uid_list("1,,2"));
  CHECK_FALSE(parse_uid_list("0-4294967295"));
}
