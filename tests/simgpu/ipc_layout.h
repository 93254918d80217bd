// The shared buffer of the interprocess tests (ipc_test.cpp and mode ipc-peer): byte offsets of
// its flags and data in a cuMemAlloc allocation of kBytes, and the patterns each step writes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fid::ipc_layout {
inline constexpr std::size_t kFlag32 = 0, kFlag64 = 8, kData = 256, kWords = 4096;
inline constexpr std::size_t kBytes = kData + kWords * 4;
inline constexpr std::uint32_t kEventSeed = 41, kKernelSeed = 42, kMemopSeed = 43,
                               kPublishSeed = 44;
}  // namespace fid::ipc_layout
