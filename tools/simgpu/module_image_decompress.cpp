// Decompression of fatbin entry payloads: zstd (flag 0x8000; what nvcc 13 uses by default, for
// PTX entries, and for cubins under -Xfatbin=-compress-all or --compress-mode=size) through
// libzstd, and LZ4 block format (flag 0x2000; --compress-mode=speed) through liblz4. Owns the
// size checks around the libraries; does not own reading entry headers.
#include <lz4.h>
#include <zstd.h>

#include <climits>
#include <new>

#include "module_image_internal.h"

namespace gcr::simgpu::detail {
namespace {

Result<OwnedBytes> allocate(uint64_t size) {
  if (size == 0 || size > kMaxDecompressedBytes) {
    return corrupt("decompressed size " + hex(size) + " is 0 or above " +
                   hex(kMaxDecompressedBytes));
  }
  OwnedBytes out;
  out.data.reset(new (std::nothrow) std::byte[size]);  // default-initialised: pages stay untouched
  if (!out.data) {
    return make_error(Errc::out_of_memory, "cannot allocate " + hex(size) + " bytes to decompress");
  }
  out.size = static_cast<size_t>(size);
  return out;
}

}  // namespace

Result<OwnedBytes> decompress_zstd(ByteView compressed, uint64_t decompressed_size) {
  unsigned long long frame_size = ZSTD_getFrameContentSize(compressed.data(), compressed.size());
  if (frame_size == ZSTD_CONTENTSIZE_ERROR) {
    return corrupt("zstd: payload is not a zstd frame");
  }
  if (frame_size != ZSTD_CONTENTSIZE_UNKNOWN && frame_size > decompressed_size) {
    return corrupt("zstd: frame content size " + hex(frame_size) +
                   " exceeds the entry's decompressed_size " + hex(decompressed_size));
  }
  auto out = allocate(decompressed_size);
  if (!out) return out;
  size_t n = ZSTD_decompress(out->data.get(), out->size, compressed.data(), compressed.size());
  if (ZSTD_isError(n)) return corrupt(std::string("zstd: ") + ZSTD_getErrorName(n));
  if (n != decompressed_size) {
    return corrupt("zstd: decompressed " + hex(n) + " bytes, entry header says " +
                   hex(decompressed_size));
  }
  return out;
}

Result<OwnedBytes> decompress_lz4(ByteView compressed, uint64_t decompressed_size) {
  if (compressed.size() > INT_MAX || decompressed_size > INT_MAX) {
    return corrupt("lz4: sizes " + hex(compressed.size()) + " / " + hex(decompressed_size) +
                   " beyond the LZ4 block limit");
  }
  auto out = allocate(decompressed_size);
  if (!out) return out;
  int n = LZ4_decompress_safe(reinterpret_cast<const char*>(compressed.data()),
                              reinterpret_cast<char*>(out->data.get()),
                              static_cast<int>(compressed.size()), static_cast<int>(out->size));
  if (n < 0)
    return corrupt("lz4: malformed block (LZ4_decompress_safe returned " + std::to_string(n) + ")");
  if (static_cast<uint64_t>(n) != decompressed_size) {
    return corrupt("lz4: decompressed " + hex(static_cast<uint64_t>(n)) +
                   " bytes, entry header says " + hex(decompressed_size));
  }
  return out;
}

}  // namespace gcr::simgpu::detail
