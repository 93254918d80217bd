// IoQueue: both backends move every byte of many requests in flight, continue short transfers,
// and report a read past the end of a file.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "gcr/file.h"
#include "io/io_queue.h"

using namespace gcr;
using namespace gcr::io;

namespace {

struct TempFile {
  TempFile() {
    char tmpl[] = "/tmp/gcr-io-test-XXXXXX";
    fd = ::mkstemp(tmpl);
    path = tmpl;
  }
  ~TempFile() {
    ::close(fd);
    ::unlink(path.c_str());
  }
  int fd;
  std::filesystem::path path;
};

std::unique_ptr<IoQueue> make(bool uring, unsigned depth) {
  if (!uring) return make_blocking_queue();
  auto q = make_uring_queue(depth);
  if (!q) {
    WARN("io_uring unavailable here (" << q.error().message << "); testing the fallback");
    return make_blocking_queue();
  }
  return std::move(q).value();
}

}  // namespace

TEST_CASE("many writes and reads in flight move every byte", "[io]") {
  bool uring = GENERATE(true, false);
  INFO((uring ? "io_uring" : "blocking"));
  const unsigned depth = 8;
  auto q = make(uring, depth);
  TempFile f;
  const std::size_t block = 256 * 1024, blocks = 40;
  std::vector<std::byte> data(block * blocks);
  std::mt19937_64 rng(1);
  for (auto& b : data) b = std::byte(static_cast<std::uint8_t>(rng()));
  std::size_t done = 0;
  unsigned max_in_flight = 0;
  for (std::size_t i = 0; i < blocks; ++i) {
    // Each write in two pieces: writev.
    std::vector<iovec> iov{{data.data() + i * block, 1000},
                           {data.data() + i * block + 1000, block - 1000}};
    REQUIRE(q->write(f.fd, i * block, std::move(iov), [&](int err) {
      CHECK(err == 0);
      ++done;
    }));
    max_in_flight = std::max(max_in_flight, q->in_flight());
  }
  REQUIRE(q->drain());
  CHECK(done == blocks);
  CHECK(max_in_flight <= depth);
  CHECK(q->in_flight() == 0);

  std::vector<std::byte> back(data.size());
  done = 0;
  for (std::size_t i = blocks; i-- > 0;) {
    REQUIRE(q->read(f.fd, i * block, std::span(back.data() + i * block, block), [&](int err) {
      CHECK(err == 0);
      ++done;
    }));
  }
  REQUIRE(q->drain());
  CHECK(done == blocks);
  CHECK(back == data);
}

TEST_CASE("a read past the end of the file reports EIO", "[io]") {
  bool uring = GENERATE(true, false);
  auto q = make(uring, 4);
  TempFile f;
  std::vector<std::byte> data(1000, std::byte{7});
  REQUIRE(::pwrite(f.fd, data.data(), data.size(), 0) == 1000);
  std::vector<std::byte> out(2000);
  int got = -1;
  REQUIRE(q->read(f.fd, 0, out, [&](int err) { got = err; }));
  REQUIRE(q->drain());
  CHECK(got == EIO);
  std::vector<std::byte> partial(500);
  REQUIRE(q->read(f.fd, 500, partial, [&](int err) { got = err; }));
  REQUIRE(q->drain());
  CHECK(got == 0);
}

TEST_CASE("errors of a request reach its completion", "[io]") {
  bool uring = GENERATE(true, false);
  auto q = make(uring, 4);
  std::vector<std::byte> out(10);
  int got = 0;
  REQUIRE(q->read(12345, 0, out, [&](int err) { got = err; }));  // not an open fd
  REQUIRE(q->drain());
  CHECK(got == EBADF);
}

TEST_CASE("the queue falls back to blocking I/O when io_uring is not wanted", "[io]") {
  CHECK(std::string(make_io_queue(4, false)->kind()) == "blocking");
  auto q = make_io_queue(4, true);
  const char* env = std::getenv("GCR_NO_URING");
  if (env != nullptr && std::string(env) == "1") CHECK(std::string(q->kind()) == "blocking");
}

TEST_CASE("iovec lists advance across entries", "[io]") {
  char a[4], b[4];
  std::vector<iovec> iov{{a, 4}, {nullptr, 0}, {b, 4}};
  std::size_t first = 0;
  CHECK(advance_iov(iov, first, 0));
  CHECK(first == 0);
  CHECK(advance_iov(iov, first, 5));
  CHECK(first == 2);
  CHECK(iov[2].iov_len == 3);
  CHECK_FALSE(advance_iov(iov, first, 3));
}

TEST_CASE("file errors say what to do on a full disk or a permission problem", "[io]") {
  auto e = file_error("cannot write", "/s/packs/x.pack", ENOSPC);
  CHECK(e.code == Errc::no_space);
  CHECK(e.message.find("/s/packs/x.pack") != std::string::npos);
  CHECK(e.message.find("gcr gc") != std::string::npos);
  auto p = file_error("cannot create", "/s/tmp/y", EACCES);
  CHECK(p.code == Errc::permission_denied);
  CHECK(p.message.find("GCR_STORE") != std::string::npos);
  CHECK(file_error("cannot create", "/ro", EROFS).code == Errc::permission_denied);
}
