// Compression: zstd only when a probe says it pays; incompressible data costs only the probe.
#include <catch2/catch.hpp>

#include "store/compress.h"
#include "test_util.h"

using namespace gcr::store;

TEST_CASE("incompressible data is stored raw after only a probe of a sample", "[compress]") {
  auto data = test::random_bytes(1 << 20, 1);
  Packed p = pack_chunk(data, 1);
  CHECK(p.codec == Codec::raw);
  CHECK(p.bytes.empty());
  CHECK(p.probe_bytes == kProbeBytes);
  CHECK(p.compress_bytes == 0);  // no full compression pass
}

TEST_CASE("compressible data is stored as zstd and decodes back", "[compress]") {
  auto data = test::text_bytes(1 << 20, 2);
  Packed p = pack_chunk(data, 1);
  REQUIRE(p.codec == Codec::zstd);
  CHECK(p.bytes.size() < data.size() / 2);
  CHECK(p.compress_bytes == data.size());
  std::vector<std::byte> out(data.size());
  REQUIRE(unpack_chunk(Codec::zstd, p.bytes, out));
  CHECK(out == data);
}

TEST_CASE("small chunks skip the probe and are compressed whole when it pays", "[compress]") {
  auto text = test::text_bytes(3000, 3);
  Packed p = pack_chunk(text, 1);
  CHECK(p.codec == Codec::zstd);
  CHECK(p.probe_bytes == 0);
  auto noise = test::random_bytes(3000, 3);
  CHECK(pack_chunk(noise, 1).codec == Codec::raw);
}

TEST_CASE("a damaged or wrongly sized payload is an error, not a crash", "[compress]") {
  auto data = test::text_bytes(100000, 4);
  Packed p = pack_chunk(data, 1);
  REQUIRE(p.codec == Codec::zstd);
  std::vector<std::byte> out(data.size());
  std::vector<std::byte> small(data.size() - 1);
  CHECK_FALSE(unpack_chunk(Codec::zstd, p.bytes, small));
  std::vector<std::byte> big(data.size() + 1);
  CHECK_FALSE(unpack_chunk(Codec::zstd, p.bytes, big));
  auto truncated = std::span(p.bytes).first(p.bytes.size() / 2);
  CHECK_FALSE(unpack_chunk(Codec::zstd, truncated, out));
  auto garbage = test::random_bytes(500, 5);
  CHECK_FALSE(unpack_chunk(Codec::zstd, garbage, out));
  CHECK_FALSE(unpack_chunk(Codec::raw, garbage, out));
  CHECK_FALSE(unpack_chunk(static_cast<Codec>(7), garbage, out));
}
