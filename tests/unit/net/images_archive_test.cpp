// A runtime's images directory over a connection (images_archive.h): what is sent arrives byte
// for byte, and what a hostile peer sends never lands outside the receiving directory.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <thread>

#include "container_runtime.h"
#include "gcr/unique_fd.h"
#include "images_archive.h"
#include "scratch_dir.h"

namespace fs = std::filesystem;
using namespace gcr;
using namespace gcr::gcrd;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

struct Pair {
  UniqueFd a, b;
  Pair() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    a.reset(fds[0]);
    b.reset(fds[1]);
  }
};

// Sends `raw` on one end (then closes it) and receives on the other into `into`.
Result<ImagesSent> receive_raw(const std::string& raw, const fs::path& into,
                               std::uint64_t limit = 1 << 20) {
  Pair p;
  std::thread sender([&] {
    (void)!::write(p.a.get(), raw.data(), raw.size());
    p.a.reset();
  });
  UniqueFd dir(::open(into.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  auto got = receive_images(p.b.get(), dir.get(), limit);
  sender.join();
  return got;
}

}  // namespace

TEST_CASE("an images directory arrives byte for byte, files only") {
  ScratchDir from, to;
  std::mt19937 rng(7);
  std::string big(3 << 20, '\0');
  for (char& c : big) c = static_cast<char>(rng());
  write_file(from / "pages-1.img", big);
  write_file(from / "empty.img", "");
  write_file(from / "gcr-checkpoint", "format=1\nid=00\n");
  write_file(from / "name with spaces%.img", "x");
  fs::create_directory(from / "subdir");
  write_file(from / "subdir" / "inside.img", "not sent");
  fs::create_symlink("/etc/passwd", from / "link.img");

  Pair p;
  Result<ImagesSent> sent = Error{Errc::internal, "not run"};
  std::thread sender([&] { sent = send_images(p.a.get(), from.path()); });
  UniqueFd dir(::open(to.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  auto got = receive_images(p.b.get(), dir.get(), 64 << 20);
  sender.join();
  REQUIRE(sent);
  REQUIRE(got);
  CHECK(got->files == 4);
  CHECK(got->bytes == big.size() + 1 + 15);
  CHECK(sent->bytes == got->bytes);
  CHECK(read_file(to / "pages-1.img") == big);
  CHECK(fs::file_size(to / "empty.img") == 0);
  CHECK(read_file(to / "name with spaces%.img") == "x");
  CHECK_FALSE(fs::exists(to / "subdir"));
  CHECK_FALSE(fs::exists(to / "link.img"));
}

TEST_CASE("a hostile peer's images land nowhere else") {
  ScratchDir outer;
  fs::create_directory(outer / "in");
  const fs::path in = outer / "in";
  SECTION("a name that climbs out") {
    auto got = receive_raw("file name=..%2Fescaped size=1\nx", in);
    REQUIRE_FALSE(got);
    CHECK(got.error().code == Errc::protocol);
    CHECK_FALSE(fs::exists(outer / "escaped"));
  }
  SECTION("a name with a directory") {
    auto got = receive_raw("file name=a%2Fb size=1\nx", in);
    REQUIRE_FALSE(got);
    CHECK(got.error().code == Errc::protocol);
  }
  SECTION("a name that is there already (a symlink planted by an earlier send)") {
    fs::create_symlink(outer / "target", in / "planted");
    auto got = receive_raw("file name=planted size=1\nx", in);
    REQUIRE_FALSE(got);
    CHECK_FALSE(fs::exists(outer / "target"));
  }
  SECTION("more bytes than the limit") {
    auto got = receive_raw("file name=a size=2000\n" + std::string(2000, 'a'), in, 1000);
    REQUIRE_FALSE(got);
    CHECK(got.error().code == Errc::no_space);
    CHECK_FALSE(fs::exists(in / "a"));
  }
  SECTION("a size that is no number") {
    auto got = receive_raw("file name=a size=-1\n", in);
    REQUIRE_FALSE(got);
    CHECK(got.error().code == Errc::protocol);
  }
  SECTION("an end that does not match what came") {
    auto got = receive_raw("file name=a size=1\nxend files=2 bytes=1\n", in);
    REQUIRE_FALSE(got);
    CHECK(got.error().code == Errc::protocol);
  }
  SECTION("a peer that goes away in the middle of a file") {
    auto got = receive_raw("file name=a size=100\nxx", in);
    REQUIRE_FALSE(got);
    CHECK(got.error().code == Errc::unreachable);
  }
  SECTION("what is not a header") {
    auto got = receive_raw("GET / HTTP/1.1\n", in);
    REQUIRE_FALSE(got);
    CHECK(got.error().code == Errc::protocol);
  }
}

TEST_CASE("container names are runc's, never paths") {
  CHECK(valid_container_name("ca"));
  CHECK(valid_container_name("train-job_1.v2"));
  CHECK_FALSE(valid_container_name(""));
  CHECK_FALSE(valid_container_name(".."));
  CHECK_FALSE(valid_container_name("a/b"));
  CHECK_FALSE(valid_container_name("-rf"));
  CHECK_FALSE(valid_container_name("a b"));
  CHECK_FALSE(valid_container_name(std::string(129, 'a')));
}
