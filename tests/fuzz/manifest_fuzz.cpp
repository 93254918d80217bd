// libFuzzer entry point for the manifest decoder (docs/image-format.md §4): any bytes must give a
// manifest or an error, never a crash, a hang or a sanitizer report; and a manifest that decodes
// must survive encode -> decode unchanged. Each input is tried as it is and "resealed" (body_bytes
// and the body hash fixed up), so that mutations reach the section parser rather than stopping
// at the hash check. Owns nothing else; seeds in corpus/manifest/.
//
//   cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DGCR_FUZZ=ON
//   ninja -C build-fuzz manifest_fuzz && build-fuzz/tests/fuzz/manifest_fuzz
//   tests/fuzz/corpus/manifest
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "gcr/manifest.h"
#include "store/bytes.h"

using namespace gcr::store;

namespace {

void decode_and_round_trip(std::span<const std::byte> bytes) {
  auto m = decode_manifest(bytes, "fuzz");
  if (!m) return;
  auto encoded = encode_manifest(*m);
  auto again = decode_manifest(encoded, "fuzz re-encoded");
  if (!again || encode_manifest(*again) != encoded) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto bytes = std::as_bytes(std::span(data, size));
  decode_and_round_trip(bytes);
  if (size >= 64) {
    std::vector<std::byte> sealed(bytes.begin(), bytes.end());
    store_le(sealed.data() + 16, size - 64, 8);
    ChunkId h = chunk_id_of(std::span(sealed).subspan(64));
    std::memcpy(sealed.data() + 40, h.bytes.data(), 16);
    decode_and_round_trip(sealed);
  }
  return 0;
}
