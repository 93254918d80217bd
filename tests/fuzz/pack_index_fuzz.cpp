// libFuzzer entry point for pack indexes and pack/record headers (docs/image-format.md §2, §3):
// any bytes must decode or be rejected, never crash; an index that decodes must round-trip, and
// every entry it accepts must lie inside its pack. Each input is tried as it is and "resealed"
// (entries hash fixed up), so that mutations reach the entry checks. Owns nothing else; seeds in
// corpus/pack_index/.
//
//   ninja -C build-fuzz pack_index_fuzz && build-fuzz/tests/fuzz/pack_index_fuzz
//   tests/fuzz/corpus/pack_index
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "store/pack_format.h"

using namespace gcr::store;

namespace {

void decode_and_round_trip(std::span<const std::byte> bytes) {
  auto index = decode_pack_index(bytes, "fuzz");
  if (!index) return;
  for (const IndexEntry& entry : index->entries) {
    if (entry.offset < kPackHeaderBytes ||
        entry.offset + kRecordHeaderBytes + entry.stored_bytes > index->pack_bytes) {
      std::abort();
    }
  }
  auto encoded = encode_pack_index(*index);
  auto again = decode_pack_index(encoded, "fuzz re-encoded");
  if (!again || encode_pack_index(*again) != encoded) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto bytes = std::as_bytes(std::span(data, size));
  // The same bytes as the start of a pack and as a record header.
  (void)check_pack_header(bytes, PackId{}, "fuzz pack");
  IndexEntry e{chunk_id_of({}), 32, 1, 1, Codec::raw};
  (void)check_record_header(bytes, e, "fuzz record");

  decode_and_round_trip(bytes);
  if (size >= kIndexHeaderBytes) {
    std::vector<std::byte> sealed(bytes.begin(), bytes.end());
    ChunkId h = chunk_id_of(std::span(sealed).subspan(kIndexHeaderBytes));
    std::memcpy(sealed.data() + 40, h.bytes.data(), 16);
    decode_and_round_trip(sealed);
  }
  return 0;
}
