// zstd for chunks: see compress.h. Contexts are per thread and live as long as the thread.
#include "store/compress.h"

#include <zstd.h>

#include <cstring>
#include <memory>

namespace gcr::store {
namespace {

struct CctxFree {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DctxFree {
  void operator()(ZSTD_DCtx* c) const { ZSTD_freeDCtx(c); }
};

ZSTD_CCtx* thread_cctx() {
  thread_local std::unique_ptr<ZSTD_CCtx, CctxFree> ctx(ZSTD_createCCtx());
  return ctx.get();
}
ZSTD_DCtx* thread_dctx() {
  thread_local std::unique_ptr<ZSTD_DCtx, DctxFree> ctx(ZSTD_createDCtx());
  return ctx.get();
}

// Compressed size of data at level, or SIZE_MAX when zstd fails or it does not shrink below limit.
std::size_t try_compress(std::span<const std::byte> data, int level, std::vector<std::byte>& out,
                         std::size_t limit) {
  out.resize(ZSTD_compressBound(data.size()));
  std::size_t n =
      ZSTD_compressCCtx(thread_cctx(), out.data(), out.size(), data.data(), data.size(), level);
  if (ZSTD_isError(n) || n >= limit) return SIZE_MAX;
  out.resize(n);
  return n;
}

}  // namespace

Packed pack_chunk(std::span<const std::byte> raw, int level) {
  Packed p;
  if (raw.empty()) return p;
  if (raw.size() > kProbeBytes) {
    // Four slices spread over the chunk: a tensor with a compressible header and random weights
    // after it is judged by the weights.
    thread_local std::vector<std::byte> sample, probe_out;
    sample.resize(kProbeBytes);
    std::size_t stride = (raw.size() - kProbeSlice) / (kProbeSlices - 1);
    for (std::size_t i = 0; i < kProbeSlices; ++i) {
      std::memcpy(sample.data() + i * kProbeSlice, raw.data() + i * stride, kProbeSlice);
    }
    p.probe_bytes = sample.size();
    std::size_t limit = sample.size() * 9 / 10;  // "compresses below 90%"
    if (try_compress(sample, level, probe_out, limit) == SIZE_MAX) return p;
  }
  p.compress_bytes = raw.size();
  // Small chunks skip the probe: compressing them whole costs no more than probing.
  if (try_compress(raw, level, p.bytes, raw.size()) == SIZE_MAX) {
    p.bytes.clear();
    return p;
  }
  p.codec = Codec::zstd;
  return p;
}

Status unpack_chunk(Codec codec, std::span<const std::byte> payload, std::span<std::byte> out) {
  switch (codec) {
    case Codec::raw:
      if (payload.size() != out.size()) {
        return make_error(Errc::corrupt_image, "raw payload of " + std::to_string(payload.size()) +
                                                   " bytes, expected " +
                                                   std::to_string(out.size()));
      }
      if (payload.data() != out.data()) std::memcpy(out.data(), payload.data(), out.size());
      return ok();
    case Codec::zstd: {
      std::size_t n = ZSTD_decompressDCtx(thread_dctx(), out.data(), out.size(), payload.data(),
                                          payload.size());
      if (ZSTD_isError(n)) {
        return make_error(Errc::corrupt_image, std::string("zstd frame: ") + ZSTD_getErrorName(n));
      }
      if (n != out.size()) {
        return make_error(Errc::corrupt_image, "zstd frame decodes to " + std::to_string(n) +
                                                   " bytes, expected " +
                                                   std::to_string(out.size()));
      }
      return ok();
    }
  }
  return make_error(Errc::corrupt_image,
                    "unknown codec " + std::to_string(static_cast<int>(codec)));
}

}  // namespace gcr::store
