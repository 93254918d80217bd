// The control protocol's codecs (libgcr/control/messages.cpp): every message round-trips, and
// hostile input -- truncated, oversized, trailing bytes, bad magic, a newer major version,
// non-zero reserved fields, unknown enum values -- is rejected with a message naming the field.
#include <catch2/catch.hpp>

#include <cstring>

#include "control/messages.h"
#include "gcr/cow_table.h"

using namespace gcr;
using namespace gcr::control;

namespace {

using Bytes = std::vector<std::uint8_t>;

void put_u32(Bytes& b, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
}

void put_u64(Bytes& b, std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
}

Bytes header_bytes(MsgType type, std::uint64_t payload) {
  auto h = encode_header(type, payload);
  return Bytes(h.begin(), h.end());
}

// Every strict prefix of a valid payload is rejected, and so is one extra byte.
void check_truncations_and_trailing(MsgType type, const Bytes& valid) {
  REQUIRE(decode_payload(type, valid));
  for (std::size_t n = 0; n < valid.size(); ++n) {
    Status s = decode_payload(type, std::span(valid.data(), n));
    INFO(msg_type_name(type) << " cut to " << n << " bytes");
    REQUIRE_FALSE(s);
    CHECK(s.error().code == Errc::protocol);
  }
  Bytes longer = valid;
  longer.push_back(0);
  Status s = decode_payload(type, longer);
  REQUIRE_FALSE(s);  // "trailing bytes", or a count that no longer matches the length
  CHECK(s.error().code == Errc::protocol);
}

std::vector<RegionRecord> some_records(std::size_t n) {
  std::vector<RegionRecord> v;
  for (std::size_t i = 0; i < n; ++i)
    v.push_back(RegionRecord{0x7f0000000000ull + i * 0x200000ull, 0x200000ull + i,
                             static_cast<std::uint32_t>(i % 3), static_cast<std::uint32_t>(i & 1)});
  return v;
}

}  // namespace

TEST_CASE("a header round-trips and carries the protocol version", "[messages]") {
  Bytes h = header_bytes(MsgType::status_reply, 1234);
  REQUIRE(h.size() == kHeaderBytes);
  CHECK(std::memcmp(h.data(), "GCRP", 4) == 0);
  auto d = decode_header(h);
  REQUIRE(d);
  CHECK(d->type == MsgType::status_reply);
  CHECK(d->major == kProtocolMajor);
  CHECK(d->minor == kProtocolMinor);
  CHECK(d->payload_bytes == 1234);
}

TEST_CASE("a header with a bad magic is not a gcr control message", "[messages]") {
  Bytes h = header_bytes(MsgType::status, 0);
  h[0] = 'X';
  auto d = decode_header(h);
  REQUIRE_FALSE(d);
  CHECK(d.error().code == Errc::protocol);
  CHECK(d.error().message.find("bad magic") != std::string::npos);
}

TEST_CASE("a header of a newer major version is refused naming both versions", "[messages]") {
  Bytes h = header_bytes(MsgType::status, 0);
  h[4] = 2;  // major 2
  h[6] = 7;  // minor 7
  auto d = decode_header(h);
  REQUIRE_FALSE(d);
  CHECK(d.error().code == Errc::unsupported);
  CHECK(d.error().message.find("2.7") != std::string::npos);
  CHECK(d.error().message.find("1." + std::to_string(kProtocolMinor)) != std::string::npos);
}

TEST_CASE("a header of a newer minor version is read", "[messages]") {
  Bytes h = header_bytes(MsgType::status, 0);
  h[6] = 9;
  auto d = decode_header(h);
  REQUIRE(d);
  CHECK(d->minor == 9);
}

TEST_CASE("a header with a non-zero reserved field or an oversized payload is refused",
          "[messages]") {
  Bytes h = header_bytes(MsgType::status, 0);
  put_u32(h, 12, 1);
  auto d = decode_header(h);
  REQUIRE_FALSE(d);
  CHECK(d.error().message.find("reserved") != std::string::npos);

  Bytes big = header_bytes(MsgType::regions_reply, 0);
  put_u64(big, 16, kMaxPayloadBytes + 1);
  d = decode_header(big);
  REQUIRE_FALSE(d);
  CHECK(d.error().code == Errc::protocol);
  CHECK(d.error().message.find("exceeds the limit") != std::string::npos);

  put_u64(big, 16, ~0ull);
  CHECK_FALSE(decode_header(big));
  CHECK_FALSE(decode_header(std::span(h.data(), kHeaderBytes - 1)));
}

TEST_CASE("an unknown message type passes the header and is refused by the payload decoder",
          "[messages]") {
  Bytes h = header_bytes(static_cast<MsgType>(999), 0);
  auto d = decode_header(h);
  REQUIRE(d);
  Status s = decode_payload(d->type, {});
  REQUIRE_FALSE(s);
  CHECK(s.error().code == Errc::unsupported);
  CHECK(s.error().message.find("type 999") != std::string::npos);
}

TEST_CASE("hello round-trips and rejects hostile variants", "[messages]") {
  Hello h{4321, ProcessState::parked, 1000, "gcr interposer"};
  Bytes b = encode_hello(h);
  auto d = decode_hello(b);
  REQUIRE(d);
  CHECK(d->pid == 4321);
  CHECK(d->state == ProcessState::parked);
  CHECK(d->uid == 1000);
  CHECK(d->software == "gcr interposer");
  check_truncations_and_trailing(MsgType::hello, b);

  Bytes bad_state = b;
  put_u32(bad_state, 4, 7);
  auto e = decode_hello(bad_state);
  REQUIRE_FALSE(e);
  CHECK(e.error().message.find("unknown process state 7") != std::string::npos);

  Bytes reserved = b;
  put_u32(reserved, 12, 5);
  CHECK_FALSE(decode_hello(reserved));
}

TEST_CASE("a string longer than its limit is refused before it is read", "[messages]") {
  Bytes b = encode_hello(Hello{1, ProcessState::running, 0, "x"});
  put_u32(b, 16, 0xffffffffu);  // software length: 4 GiB
  auto d = decode_hello(b);
  REQUIRE_FALSE(d);
  CHECK(d.error().message.find("'software'") != std::string::npos);
  CHECK(d.error().message.find("exceeds the limit") != std::string::npos);
}

TEST_CASE("an error reply carries its code and text", "[messages]") {
  Bytes b = encode_error(Error{Errc::timeout, "CUDA calls did not finish within 100 ms"});
  auto d = decode_error(b);
  REQUIRE(d);
  CHECK(d->error.code == Errc::timeout);
  CHECK(d->error.message == "CUDA calls did not finish within 100 ms");
  check_truncations_and_trailing(MsgType::error, b);
}

TEST_CASE("an error code from a newer peer decodes as internal and keeps the number",
          "[messages]") {
  Bytes b = encode_error(Error{Errc::busy, "later"});
  put_u32(b, 0, 77);
  auto d = decode_error(b);
  REQUIRE(d);
  CHECK(d->error.code == Errc::internal);
  CHECK(d->error.message == "(error code 77) later");

  put_u32(b, 0, 0);
  CHECK_FALSE(decode_error(b));  // an error with code ok is nonsense
}

TEST_CASE("an overlong error text is cut to the limit when sent", "[messages]") {
  Bytes b = encode_error(Error{Errc::internal, std::string(kMaxErrorTextBytes * 2, 'e')});
  auto d = decode_error(b);
  REQUIRE(d);
  CHECK(d->error.message.size() == kMaxErrorTextBytes);
}

TEST_CASE("ok names the request it answers", "[messages]") {
  Bytes b = encode_ok(MsgType::quiesce);
  auto d = decode_ok(b);
  REQUIRE(d);
  CHECK(*d == MsgType::quiesce);
  check_truncations_and_trailing(MsgType::ok, b);
}

TEST_CASE("status_reply round-trips every field", "[messages]") {
  StatusInfo s;
  s.state = ProcessState::quiesced;
  s.regions = 3;
  s.region_bytes = 6ull << 21;
  s.dirty_bytes = 1ull << 21;
  s.requested_bytes = 5ull << 20;
  s.epoch = 9;
  s.last_checkpoint = "3f2a0b";
  s.conservative = true;
  s.host_registered = true;
  Bytes b = encode_status_reply(s);
  auto d = decode_status_reply(b);
  REQUIRE(d);
  CHECK(d->state == s.state);
  CHECK(d->regions == s.regions);
  CHECK(d->region_bytes == s.region_bytes);
  CHECK(d->dirty_bytes == s.dirty_bytes);
  CHECK(d->requested_bytes == s.requested_bytes);
  CHECK(d->epoch == s.epoch);
  CHECK(d->last_checkpoint == s.last_checkpoint);
  CHECK(d->conservative);
  CHECK(d->host_registered);
  check_truncations_and_trailing(MsgType::status_reply, b);
}

TEST_CASE("host_dma_reply round-trips and refuses counts and ranges that cannot be", "[messages]") {
  HostDmaRanges r;
  r.ranges = {{0x7f0000000000ull, 4096}, {0x7f0000200000ull, 2ull << 20}};
  r.overflow = true;
  auto b = encode_host_dma_reply(r);
  REQUIRE(b);
  auto d = decode_host_dma_reply(*b);
  REQUIRE(d);
  CHECK(*d == r);
  check_truncations_and_trailing(MsgType::host_dma_reply, *b);

  HostDmaRanges none;
  auto e = encode_host_dma_reply(none);
  REQUIRE(e);
  auto dn = decode_host_dma_reply(*e);
  REQUIRE(dn);
  CHECK(dn->ranges.empty());
  CHECK_FALSE(dn->overflow);
  CHECK_FALSE(dn->touched);

  HostDmaRanges touched;  // 1.5's flag, alone
  touched.ranges = {{0x7f0000000000ull, 4096}};
  touched.touched = true;
  auto t = encode_host_dma_reply(touched);
  REQUIRE(t);
  CHECK((*t)[4] == 2);
  auto dt = decode_host_dma_reply(*t);
  REQUIRE(dt);
  CHECK(*dt == touched);

  Bytes wraps = *b;  // the second range's bytes run past the end of the address space
  for (std::size_t i = 0; i < 8; ++i) wraps[8 + 16 + 16 - 8 + i] = std::uint8_t{0xff};
  CHECK_FALSE(decode_host_dma_reply(wraps));
  Bytes too_many = *b;
  too_many[3] = 0x7f;  // count far past kMaxHostDmaRanges
  CHECK_FALSE(decode_host_dma_reply(too_many));

  HostDmaRanges big;
  big.ranges.resize(kMaxHostDmaRanges + 1);
  CHECK_FALSE(encode_host_dma_reply(big));
}

TEST_CASE("regions_reply round-trips and refuses a count that disagrees with the payload",
          "[messages]") {
  auto records = some_records(5);
  auto b = encode_regions_reply(records);
  REQUIRE(b);
  auto d = decode_regions_reply(*b);
  REQUIRE(d);
  CHECK(*d == records);
  check_truncations_and_trailing(MsgType::regions_reply, *b);

  Bytes lying = *b;
  put_u32(lying, 0, 1000000);  // more than fits: refused before any allocation of that size
  auto e = decode_regions_reply(lying);
  REQUIRE_FALSE(e);
  CHECK(e.error().message.find("exceeds the limit") != std::string::npos);
  put_u32(lying, 0, 6);
  CHECK_FALSE(decode_regions_reply(lying));

  auto empty = encode_regions_reply({});
  REQUIRE(empty);
  auto none = decode_regions_reply(*empty);
  REQUIRE(none);
  CHECK(none->empty());
}

TEST_CASE("a region of size zero or one that wraps the address space is refused", "[messages]") {
  auto records = some_records(2);
  auto b = encode_regions_reply(records);
  REQUIRE(b);
  Bytes zero = *b;
  put_u64(zero, 8 + 24 + 8, 0);  // second record's size
  auto d = decode_regions_reply(zero);
  REQUIRE_FALSE(d);
  CHECK(d.error().message.find("record 1 has size 0") != std::string::npos);

  Bytes wrap = *b;
  put_u64(wrap, 8, ~0ull - 10);  // first record's address
  d = decode_regions_reply(wrap);
  REQUIRE_FALSE(d);
  CHECK(d.error().message.find("wraps") != std::string::npos);
}

TEST_CASE("quiesce carries its timeout", "[messages]") {
  Bytes b = encode_quiesce(12345);
  auto d = decode_quiesce(b);
  REQUIRE(d);
  CHECK(*d == 12345);
  check_truncations_and_trailing(MsgType::quiesce, b);
}

TEST_CASE("a region batch round-trips as parked and as unpark", "[messages]") {
  RegionBatch batch{600, 250, some_records(250)};
  auto b = encode_region_batch(batch);
  REQUIRE(b);
  for (MsgType t : {MsgType::parked, MsgType::unpark}) {
    auto d = decode_region_batch(t, *b);
    REQUIRE(d);
    CHECK(d->total == 600);
    CHECK(d->first == 250);
    CHECK(d->records == batch.records);
  }
  check_truncations_and_trailing(MsgType::unpark, *b);

  auto empty = encode_region_batch(RegionBatch{0, 0, {}});
  REQUIRE(empty);
  CHECK(decode_region_batch(MsgType::parked, *empty));
}

TEST_CASE("region batches that break the batch rules are refused both ways", "[messages]") {
  CHECK_FALSE(encode_region_batch(RegionBatch{300, 0, some_records(251)}));  // > 250 per batch
  CHECK_FALSE(encode_region_batch(RegionBatch{5, 3, some_records(3)}));      // past the total
  CHECK_FALSE(encode_region_batch(RegionBatch{5, 0, {}}));                   // empty, total 5
  CHECK_FALSE(encode_region_batch(RegionBatch{kMaxRegions + 1, 0, some_records(1)}));

  auto b = encode_region_batch(RegionBatch{10, 0, some_records(3)});
  REQUIRE(b);
  Bytes past = *b;
  put_u32(past, 4, 8);  // first 8 + 3 > 10
  auto d = decode_region_batch(MsgType::unpark, past);
  REQUIRE_FALSE(d);
  CHECK(d.error().message.find("exceed the total") != std::string::npos);

  Bytes many = *b;
  put_u32(many, 8, 251);
  put_u32(many, 0, 1000);
  d = decode_region_batch(MsgType::unpark, many);
  REQUIRE_FALSE(d);
  CHECK(d.error().message.find("per batch") != std::string::npos);

  Bytes count_lies = *b;
  put_u32(count_lies, 8, 2);
  CHECK_FALSE(decode_region_batch(MsgType::unpark, count_lies));

  Bytes reserved = *b;
  put_u32(reserved, 12, 1);
  CHECK_FALSE(decode_region_batch(MsgType::unpark, reserved));
}

TEST_CASE("new_epoch carries a checkpoint id of a restricted alphabet", "[messages]") {
  auto b = encode_new_epoch("3f2a0b1c.tag-7:x_y");
  REQUIRE(b);
  auto d = decode_new_epoch(*b);
  REQUIRE(d);
  CHECK(*d == "3f2a0b1c.tag-7:x_y");
  check_truncations_and_trailing(MsgType::new_epoch, *b);

  CHECK_FALSE(encode_new_epoch(""));
  CHECK_FALSE(encode_new_epoch("../etc/passwd"));
  CHECK_FALSE(encode_new_epoch("has space"));
  CHECK_FALSE(encode_new_epoch(std::string(kMaxCheckpointIdBytes + 1, 'a')));
  CHECK(encode_new_epoch(std::string(kMaxCheckpointIdBytes, 'a')));

  Bytes slash = *b;
  slash[4] = '/';
  auto e = decode_new_epoch(slash);
  REQUIRE_FALSE(e);
  CHECK(e.error().code == Errc::protocol);
}

TEST_CASE("requests without a payload refuse one", "[messages]") {
  for (MsgType t : {MsgType::status, MsgType::regions, MsgType::resume, MsgType::park,
                    MsgType::park_done, MsgType::bye}) {
    CHECK(decode_payload(t, {}));
    Bytes one{0};
    CHECK_FALSE(decode_payload(t, one));
  }
}

TEST_CASE("copy-on-write messages round-trip, and reject what the other side would", "[messages]") {
  auto b = encode_cow_begin(3);
  REQUIRE(b);
  CHECK(*decode_cow_begin(*b) == 3u);
  check_truncations_and_trailing(MsgType::cow_begin, *b);
  CHECK_FALSE(encode_cow_begin(0));
  CHECK_FALSE(encode_cow_begin(gcr::cow::kMaxEntries + 1));
  Bytes zero = *b;
  std::memset(zero.data(), 0, 4);
  CHECK_FALSE(decode_cow_begin(zero));

  auto t = encode_cow_take(7);
  CHECK(*decode_cow_take(t) == 7u);
  check_truncations_and_trailing(MsgType::cow_take, t);

  auto s = encode_cow_snapshot({5, 2u << 20});
  REQUIRE(s);
  CHECK(*decode_cow_snapshot(*s) == CowSnapshot{5, 2u << 20});
  check_truncations_and_trailing(MsgType::cow_snapshot, *s);
  CHECK_FALSE(encode_cow_snapshot({1, 0}));

  CHECK(decode_payload(MsgType::cow_end, {}));
  CHECK(msg_type_name(MsgType::cow_snapshot) == "cow_snapshot");
}

TEST_CASE("touch_order_reply carries addresses and rejects a count that does not fit",
          "[messages]") {
  std::vector<std::uint64_t> order = {0x200000000000ull, 0x200000200000ull, 7};
  auto b = encode_touch_order_reply(order);
  REQUIRE(b);
  CHECK(*decode_touch_order_reply(*b) == order);
  check_truncations_and_trailing(MsgType::touch_order_reply, *b);
  auto empty = encode_touch_order_reply({});
  REQUIRE(empty);
  CHECK(decode_touch_order_reply(*empty)->empty());
  CHECK(decode_payload(MsgType::touch_order, {}));
}
