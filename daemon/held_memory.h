// Device memory gcrd holds for a checkpoint until it is stored: a parked region it imported, or
// the copy a running process made of a region before writing it (soft copy-on-write). What the
// drain (drain.h) reads; gcrd's are allocations mapped on the GPU (device.h, ImportedMemory), a
// test's are host buffers.
#pragma once

#include <cstdint>
#include <span>

#include "gcr/result.h"

namespace gcr::gcrd {

class HeldMemory {
 public:
  virtual ~HeldMemory() = default;
  virtual std::uint64_t size() const = 0;
  // [offset, offset + out.size()) of it into host memory.
  virtual Status read(std::uint64_t offset, std::span<std::byte> out) const = 0;
};

}  // namespace gcr::gcrd
