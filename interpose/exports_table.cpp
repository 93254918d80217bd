// The address of this library's own function for every exported driver name: a C++ wrapper
// where there is one (a strong definition), else the trampoline (weak). cuGetProcAddress hands
// these out. This file must not include cuda.h: the names are declared with a signature of their
// own, as plain symbols.
#include <algorithm>
#include <cstring>
#include <iterator>

#define GCR_DRIVER_SYMBOL(name) extern "C" int name();
#include "driver_symbols.gen.inc"
#undef GCR_DRIVER_SYMBOL

namespace gcr::interpose {
namespace {
struct OwnSymbol {
  const char* name;
  void* address;
};
#define GCR_DRIVER_SYMBOL(name) {#name, reinterpret_cast<void*>(&name)},
const OwnSymbol kOwn[] = {
#include "driver_symbols.gen.inc"
};
#undef GCR_DRIVER_SYMBOL
}  // namespace

void* own_symbol(const char* name) {
  auto it = std::lower_bound(
      std::begin(kOwn), std::end(kOwn), name,
      [](const OwnSymbol& s, const char* n) { return std::strcmp(s.name, n) < 0; });
  return it != std::end(kOwn) && std::strcmp(it->name, name) == 0 ? it->address : nullptr;
}

}  // namespace gcr::interpose
