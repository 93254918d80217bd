// The CPU-twin contract, seen from simgpu. tests/workloads/include/simt.h is the other side: a
// program exports `extern "C" void simgpu_twin__<name>(const TwinLaunch*, void** params)` for
// each kernel it wants run on simgpu.
#pragma once

#include <string>

namespace gcr::simgpu {

// Same layout as SimtLaunch in simt.h.
struct TwinLaunch {
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_bytes;
  unsigned block_begin;
  unsigned block_end;     // 0: all blocks
  long long alias_delta;  // device address + alias_delta = where the twin reaches it
};

// The twin symbol for a kernel's (possibly mangled) name: "_Z4axpyPfPKffi" -> "simgpu_twin__axpy",
// "ns::k" -> "simgpu_twin__ns__k". Empty for names a twin cannot have (templates, operators).
std::string twin_symbol_for(const std::string& kernel_name);

}  // namespace gcr::simgpu
