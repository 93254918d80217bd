// Chunk ids: XXH3-128 in canonical (big-endian) form, printed as 32 lowercase hex digits.
#include <catch2/catch.hpp>

#include "gcr/chunk_id.h"
#include "store/hash.h"
#include "test_util.h"

using namespace gcr::store;

// Golden values from xxHash 0.8.1 (XXH3_128bits + XXH128_canonicalFromHash, printed byte by
// byte); regenerate with a five-line C program against <xxhash.h> if the library changes.
TEST_CASE("a chunk id is the canonical XXH3-128 of the raw bytes", "[chunk_id]") {
  CHECK(chunk_id_of({}).hex() == "99aa06d3014798d86001c324468d497f");
  CHECK(chunk_id_of(test::as_bytes("abc")).hex() == "06b05ab6733a618578af5f94892f3950");
}

TEST_CASE("ids round-trip through hex and reject anything but 32 hex digits", "[chunk_id]") {
  Id128 id = Id128::random();
  auto back = Id128::from_hex(id.hex());
  REQUIRE(back);
  CHECK(*back == id);
  CHECK(Id128::from_hex(std::string(32, 'A')));  // upper case accepted on input
  CHECK_FALSE(Id128::from_hex(""));
  CHECK_FALSE(Id128::from_hex(std::string(31, '0')));
  CHECK_FALSE(Id128::from_hex(std::string(33, '0')));
  CHECK_FALSE(Id128::from_hex(std::string(31, '0') + "g"));
  CHECK(Id128::random() != Id128::random());
}

TEST_CASE("the zero chunk id is the hash of that many zero bytes", "[chunk_id]") {
  std::vector<std::byte> zeros(12345);
  CHECK(zero_chunk_id(12345) == chunk_id_of(zeros));
  CHECK(zero_chunk_id(12345) == zero_chunk_id(12345));
  CHECK(all_zero(zeros));
  zeros[12344] = std::byte{1};
  CHECK_FALSE(all_zero(zeros));
  zeros[12344] = std::byte{0};
  zeros[3] = std::byte{1};
  CHECK_FALSE(all_zero(zeros));
  CHECK(all_zero({}));
}
