// Shared by the module_image_*.cpp files only: a bounds-checked byte view, error helpers, and
// one parse function per format. Owns no parsing itself; module_image.cpp decides which format an
// image is, each module_image_<format>.cpp parses one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "gcr/result.h"
#include "module_image.h"

namespace gcr::simgpu::detail {

// True if [offset, offset + length) lies within [0, size); cannot overflow.
inline bool fits(uint64_t offset, uint64_t length, uint64_t size) {
  return offset <= size && length <= size - offset;
}

// A read-only window of `size` bytes. Every read names an offset and a length and is checked
// first with `contains`, which cannot overflow.
class ByteView {
 public:
  ByteView() = default;
  ByteView(const std::byte* data, size_t size) : data_(data), size_(size) {}

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }

  bool contains(uint64_t offset, uint64_t length) const { return fits(offset, length, size_); }
  // Precondition: contains(offset, length).
  ByteView sub(uint64_t offset, uint64_t length) const {
    return ByteView(data_ + offset, static_cast<size_t>(length));
  }
  // Little-endian load. Precondition: contains(offset, sizeof(T)).
  template <typename T>
  T load(uint64_t offset) const {
    T v;
    std::memcpy(&v, data_ + offset, sizeof(T));
    return v;
  }

 private:
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

// A decompressed payload; deliberately not zero-filled on allocation.
struct OwnedBytes {
  std::unique_ptr<std::byte[]> data;
  size_t size = 0;
  ByteView view() const { return ByteView(data.get(), size); }
};

// "0x1a2b".
std::string hex(uint64_t v);

inline Error corrupt(std::string message) {
  return make_error(Errc::corrupt_image, std::move(message));
}
inline Error unsupported(std::string message) {
  return make_error(Errc::unsupported, std::move(message));
}

// module_image_elf.cpp: a cubin. `image` ends at the caller's limit (SIZE_MAX bytes if unknown).
Result<ModuleImage> parse_cubin(ByteView image);

// module_image_nvinfo.cpp: one `.nv.info.<kernel>` section's attributes into `kernel`'s params
// and param_bytes. `where` names the section in errors.
Status parse_kernel_nv_info(ByteView section, const std::string& where, KernelInfo& kernel);

// module_image_ptx.cpp: PTX text (without its terminating NUL).
Result<ModuleImage> parse_ptx(std::string_view text);

// module_image_fatbin.cpp: a fatbin whose first byte is image.data(); picks one entry.
Result<ModuleImage> parse_fatbin(ByteView image, int device_sm);

// module_image_decompress.cpp: a fatbin entry's payload. `decompressed_size` is the entry
// header's claim; the result has exactly that many bytes or is an error.
Result<OwnedBytes> decompress_zstd(ByteView compressed, uint64_t decompressed_size);
Result<OwnedBytes> decompress_lz4(ByteView compressed, uint64_t decompressed_size);

// The largest decompressed payload accepted (a sanity bound against hostile size fields).
inline constexpr uint64_t kMaxDecompressedBytes = 1ull << 30;

}  // namespace gcr::simgpu::detail
