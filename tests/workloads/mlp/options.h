// mlp_train's command line.
#pragma once

#include <cstdint>
#include <string>

namespace mlp {

inline constexpr int kInputDim = 64;
inline constexpr int kOutputDim = 16;

struct Options {
  int steps = 200;
  int batch = 64;
  int hidden = 128;
  int layers = 3;  // linear layers: kInputDim -> hidden -> ... -> hidden -> kOutputDim
  int streams = 3;
  std::uint64_t seed = 1;
  std::uint64_t footprint = 0;         // bytes of ballast table; 0: none
  std::uint64_t host_footprint = 0;    // bytes of pageable host ballast; 0: none
  std::uint64_t host_writes = 1;       // pages of it each step rewrites
  std::uint64_t pinned_footprint = 0;  // bytes of pinned host memory written by the device
  int step_delay_ms = 0;
  std::string delay_while;  // the delay only while this file exists; empty: always
  std::string hold_while;   // the last step waits while this file exists; empty: never
  bool quiet = false;
  bool vmm = false;
  bool vmm_share = false;  // --vmm, and its first page exported as an fd held open  // parameters
                           // and optimizer state in an expandable segment (vmm_segment.h)
};

Options parse_options(int argc, char** argv);

}  // namespace mlp
