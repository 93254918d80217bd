// Finding a kernel's CPU twin by name.
#include "twin.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

namespace gcr::simgpu {

std::string twin_symbol_for(const std::string& kernel_name) {
  std::string base = kernel_name;
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(
      abi::__cxa_demangle(kernel_name.c_str(), nullptr, nullptr, &status), std::free);
  if (status == 0 && demangled) {
    base = demangled.get();
    if (auto paren = base.find('('); paren != std::string::npos) base.resize(paren);
  }
  if (base.empty() || base.find_first_of("<> ~,*&") != std::string::npos) return {};
  std::string out = "simgpu_twin__";
  for (std::size_t i = 0; i < base.size(); ++i) {
    if (base.compare(i, 2, "::") == 0) {
      out += "__";
      ++i;
    } else {
      out += base[i];
    }
  }
  return out;
}

}  // namespace gcr::simgpu
