// parse_module_image: recognises what kind of image it was handed (fatbin, fat binary wrapper,
// cubin, PTX text) and hands it to that format's parser. Owns the wrapper struct, which is only
// a pointer to a fatbin. Does not parse any format itself (module_image_<format>.cpp do).
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "module_image.h"
#include "module_image_internal.h"

namespace gcr::simgpu {
namespace detail {

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  return buf;
}

}  // namespace detail

namespace {

using detail::ByteView;
using detail::corrupt;
using detail::hex;

// Little-endian magics. None contains a 0 byte, so matching them byte by byte never reads past
// the NUL of a PTX string shorter than the magic.
constexpr uint8_t kFatbinMagic[4] = {0x50, 0xED, 0x55, 0xBA};   // 0xBA55ED50
constexpr uint8_t kWrapperMagic[4] = {0xB1, 0x43, 0x62, 0x46};  // 0x466243B1 (FATBINC_MAGIC)
constexpr uint8_t kElfMagic[4] = {0x7F, 'E', 'L', 'F'};

bool starts_with(const std::byte* image, size_t limit, const uint8_t (&magic)[4]) {
  for (size_t i = 0; i < 4; ++i) {
    if (i >= limit || static_cast<uint8_t>(image[i]) != magic[i]) return false;
  }
  return true;
}

// __fatBinC_Wrapper_t from fatbinary_section.h, as laid out on x86-64.
constexpr size_t kWrapperVersionOffset = 4;
constexpr size_t kWrapperDataOffset = 8;
constexpr size_t kWrapperMinBytes = 16;  // up to and including `data`

Result<ModuleImage> parse_wrapper(const std::byte* image, size_t limit, int device_sm) {
  if (limit < kWrapperMinBytes) {
    return corrupt("fat binary wrapper: needs " + hex(kWrapperMinBytes) + " bytes, limit is " +
                   hex(limit));
  }
  ByteView wrapper(image, kWrapperMinBytes);
  auto version = wrapper.load<uint32_t>(kWrapperVersionOffset);
  if (version != 1 && version != 2) {
    return detail::unsupported("fat binary wrapper: version " + std::to_string(version) +
                               " at offset 0x4 (expected 1 or 2)");
  }
  auto data = wrapper.load<uintptr_t>(kWrapperDataOffset);
  if (data == 0) return corrupt("fat binary wrapper: data pointer at offset 0x8 is null");

  size_t fatbin_limit = SIZE_MAX;
  if (limit != SIZE_MAX) {
    // A caller that knows the readable range: the fatbin must lie inside it.
    auto base = reinterpret_cast<uintptr_t>(image);
    if (data < base || data - base >= limit) {
      return corrupt("fat binary wrapper: data pointer " + hex(data) +
                     " at offset 0x8 lies outside the image's " + hex(limit) + " readable bytes");
    }
    fatbin_limit = limit - (data - base);
  }
  const auto* fatbin = reinterpret_cast<const std::byte*>(data);
  if (!starts_with(fatbin, fatbin_limit, kFatbinMagic)) {
    return corrupt("fat binary wrapper: data pointer " + hex(data) +
                   " does not point at a fatbin (magic 0xba55ed50)");
  }
  return detail::parse_fatbin(ByteView(fatbin, fatbin_limit), device_sm);
}

Result<ModuleImage> parse_ptx_text(const std::byte* image, size_t limit) {
  const char* text = reinterpret_cast<const char*>(image);
  size_t length = 0;
  if (limit == SIZE_MAX) {
    length = std::strlen(text);
  } else {
    const void* nul = std::memchr(text, 0, limit);
    length = nul ? static_cast<size_t>(static_cast<const char*>(nul) - text) : limit;
  }
  return detail::parse_ptx(std::string_view(text, length))
      .context("not a fatbin, fat binary wrapper or cubin (by magic), so read as PTX");
}

}  // namespace

Result<ModuleImage> parse_module_image(const void* image, size_t limit, int device_sm) {
  if (image == nullptr) return make_error(Errc::invalid_argument, "module image: null pointer");
  if (limit == 0) return corrupt("module image: no readable bytes (limit 0)");
  const auto* bytes = static_cast<const std::byte*>(image);
  if (starts_with(bytes, limit, kFatbinMagic)) {
    return detail::parse_fatbin(ByteView(bytes, limit), device_sm);
  }
  if (starts_with(bytes, limit, kWrapperMagic)) return parse_wrapper(bytes, limit, device_sm);
  if (starts_with(bytes, limit, kElfMagic)) return detail::parse_cubin(ByteView(bytes, limit));
  return parse_ptx_text(bytes, limit);
}

}  // namespace gcr::simgpu
