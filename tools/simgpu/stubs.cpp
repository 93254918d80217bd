// Every driver function simgpu does not implement: a weak definition that logs the name once and
// answers CUDA_ERROR_NOT_SUPPORTED. The api_*.cpp files' definitions override these at link
// time. Also the table of every exported function's address, for cuGetProcAddress.
//
// This file must not include cuda.h: the stubs are declared with a signature of their own.
#include <algorithm>
#include <cstring>
#include <string>

namespace gcr::simgpu {
void log_once(const std::string& key, const std::string& message);

namespace {
constexpr int kNotSupported = 801;  // CUDA_ERROR_NOT_SUPPORTED

int unsupported(const char* name) {
  log_once(std::string("unsupported:") + name,
           std::string(name) + " is not implemented by simgpu (CUDA_ERROR_NOT_SUPPORTED)");
  return kNotSupported;
}
}  // namespace
}  // namespace gcr::simgpu

#define GCR_DRIVER_SYMBOL(name)                 \
  extern "C" __attribute__((weak)) int name() { \
    return gcr::simgpu::unsupported(#name);     \
  }
#include "driver_symbols.gen.inc"
#undef GCR_DRIVER_SYMBOL

namespace gcr::simgpu {
namespace {
struct SymbolAddress {
  const char* name;
  void* address;
};
#define GCR_DRIVER_SYMBOL(name) {#name, reinterpret_cast<void*>(&name)},
const SymbolAddress kSymbols[] = {
#include "driver_symbols.gen.inc"
};
#undef GCR_DRIVER_SYMBOL
}  // namespace

// The address of this library's own exported driver function `name`, or null.
void* own_symbol_address(const char* name) {
  auto it = std::find_if(std::begin(kSymbols), std::end(kSymbols),
                         [&](const SymbolAddress& s) { return std::strcmp(s.name, name) == 0; });
  return it == std::end(kSymbols) ? nullptr : it->address;
}

}  // namespace gcr::simgpu
