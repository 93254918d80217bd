// libFuzzer entry point for the control protocol's decoders (libgcr/control/messages.cpp): any
// bytes, read as a stream of framed messages and as the payload of every message type, must give
// a value or an error, never a crash, a hang, an oversized allocation or a sanitizer report.
// Owns nothing else. Decoded values are re-encoded and must decode to the same bytes.
//
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Ilibgcr/include -Ilibgcr \
//     tests/fuzz/control_messages_fuzz.cpp libgcr/control/messages.cpp libgcr/util/result.cpp \
//     -o control_messages_fuzz
//   ./control_messages_fuzz -max_len=65536 corpus/
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "control/messages.h"

using namespace gcr::control;

namespace {

constexpr MsgType kTypes[] = {
    MsgType::hello,         MsgType::error,        MsgType::ok,
    MsgType::status,        MsgType::status_reply, MsgType::regions,
    MsgType::regions_reply, MsgType::quiesce,      MsgType::resume,
    MsgType::park,          MsgType::parked,       MsgType::park_done,
    MsgType::unpark,        MsgType::new_epoch,    MsgType::bye,
    MsgType::cow_begin,     MsgType::cow_take,     MsgType::cow_snapshot,
    MsgType::cow_end,       MsgType::touch_order,  MsgType::touch_order_reply,
};

// A decoded value must survive encode -> decode unchanged.
void check_round_trip(MsgType type, std::span<const std::uint8_t> payload) {
  switch (type) {
    case MsgType::regions_reply: {
      auto d = decode_regions_reply(payload);
      if (!d) return;
      auto e = encode_regions_reply(*d);
      if (!e || !decode_regions_reply(*e) || *decode_regions_reply(*e) != *d) std::abort();
      return;
    }
    case MsgType::parked:
    case MsgType::unpark: {
      auto d = decode_region_batch(type, payload);
      if (!d) return;
      auto e = encode_region_batch(*d);
      if (!e || std::vector<std::uint8_t>(payload.begin(), payload.end()) != *e) std::abort();
      return;
    }
    case MsgType::new_epoch: {
      auto d = decode_new_epoch(payload);
      if (!d) return;
      auto e = encode_new_epoch(*d);
      if (!e || std::vector<std::uint8_t>(payload.begin(), payload.end()) != *e) std::abort();
      return;
    }
    case MsgType::cow_begin: {
      auto d = decode_cow_begin(payload);
      if (!d) return;
      auto e = encode_cow_begin(*d);
      if (!e || std::vector<std::uint8_t>(payload.begin(), payload.end()) != *e) std::abort();
      return;
    }
    case MsgType::cow_take: {
      auto d = decode_cow_take(payload);
      if (!d) return;
      if (std::vector<std::uint8_t>(payload.begin(), payload.end()) != encode_cow_take(*d))
        std::abort();
      return;
    }
    case MsgType::touch_order_reply: {
      auto d = decode_touch_order_reply(payload);
      if (!d) return;
      auto e = encode_touch_order_reply(*d);
      if (!e || std::vector<std::uint8_t>(payload.begin(), payload.end()) != *e) std::abort();
      return;
    }
    case MsgType::cow_snapshot: {
      auto d = decode_cow_snapshot(payload);
      if (!d) return;
      auto e = encode_cow_snapshot(*d);
      if (!e || std::vector<std::uint8_t>(payload.begin(), payload.end()) != *e) std::abort();
      return;
    }
    default:
      return;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;  // libFuzzer may pass a null pointer for empty input
  std::span<const std::uint8_t> in(data, size);

  // As a stream of frames: header, then its payload, as the channel reads them.
  std::span<const std::uint8_t> rest = in;
  while (rest.size() >= kHeaderBytes) {
    auto h = decode_header(rest.first(kHeaderBytes));
    if (!h) break;
    rest = rest.subspan(kHeaderBytes);
    if (h->payload_bytes > rest.size()) break;
    auto payload = rest.first(static_cast<std::size_t>(h->payload_bytes));
    (void)decode_payload(h->type, payload);
    check_round_trip(h->type, payload);
    rest = rest.subspan(payload.size());
  }

  // As the payload of every type.
  for (MsgType t : kTypes) {
    (void)decode_payload(t, in);
    check_round_trip(t, in);
  }
  return 0;
}
