// "0x7f0000200000": a device address, as gcrd's messages show it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace gcr::gcrd {

inline std::string hex_address(std::uint64_t address) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(address));
  return b;
}

}  // namespace gcr::gcrd
