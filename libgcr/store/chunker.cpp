// Chunk boundaries: see chunker.h.
#include "store/chunker.h"

#include <algorithm>

#include "store/hash.h"

namespace gcr::store {

std::vector<std::uint32_t> cut_fixed(std::uint64_t size, std::uint32_t chunk_bytes) {
  std::vector<std::uint32_t> sizes;
  sizes.reserve(static_cast<std::size_t>(size / chunk_bytes + 1));
  for (std::uint64_t at = 0; at < size; at += chunk_bytes) {
    sizes.push_back(static_cast<std::uint32_t>(std::min<std::uint64_t>(chunk_bytes, size - at)));
  }
  return sizes;
}

std::vector<std::uint32_t> cut_pages(std::span<const std::byte> data, bool final) {
  std::vector<std::uint32_t> sizes;
  std::size_t start = 0;  // of the chunk being grown
  std::size_t at = 0;     // end of the pages looked at so far
  while (data.size() - at >= kPageBytes) {
    std::uint64_t h = xxh3_64(data.subspan(at, kPageBytes));
    at += kPageBytes;
    std::size_t len = at - start;
    if ((len >= kCdcMinBytes && (h & kCdcMask) == 0) || len >= kCdcMaxBytes) {
      sizes.push_back(static_cast<std::uint32_t>(len));
      start = at;
    }
  }
  if (final && start < data.size()) {
    // The tail: the pages since the last cut and a partial page, if any (a page image is whole
    // pages; other data cut this way may not be). It may exceed kCdcMaxBytes only by < 1 page,
    // which cannot happen: a chunk is cut at kCdcMaxBytes before its tail page is added.
    sizes.push_back(static_cast<std::uint32_t>(data.size() - start));
  }
  return sizes;
}

bool is_page_image(std::string_view relative) {
  auto slash = relative.rfind('/');
  std::string_view base = slash == std::string_view::npos ? relative : relative.substr(slash + 1);
  return base.size() > 10 && base.starts_with("pages-") && base.ends_with(".img");
}

}  // namespace gcr::store
