// Host memory that device bytes pass through on their way to or from the store: one buffer,
// reused, grown when a larger piece comes.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "gcr/result.h"

namespace gcr::gcrd {

class Staging {
 public:
  Staging() = default;
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  ~Staging() {
    if (data_) munmap(data_, size_);
  }
  Result<std::span<std::byte>> get(std::uint64_t size) {
    if (size > size_) {
      if (data_) munmap(data_, size_);
      void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      data_ = p == MAP_FAILED ? nullptr : static_cast<std::byte*>(p);
      size_ = data_ ? size : 0;
      if (!data_)
        return Error{Errc::out_of_memory,
                     "no host memory to stage " + std::to_string(size >> 20) + " MiB"};
    }
    return std::span<std::byte>(data_, size);
  }

 private:
  std::byte* data_ = nullptr;
  std::uint64_t size_ = 0;
};

}  // namespace gcr::gcrd
