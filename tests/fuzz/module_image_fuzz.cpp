// libFuzzer entry point for simgpu's module image parser: any bytes, as a fatbin, wrapper,
// cubin or PTX for an sm_90 device, must give a module or an error, never a crash, a hang or a
// sanitizer report. Owns nothing else; seed it with the images tests/unit/simgpu builds.
//
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Itools/simgpu \
//     -Ilibgcr/include tests/fuzz/module_image_fuzz.cpp tools/simgpu/module_image*.cpp \
//     libgcr/util/result.cpp -lzstd -llz4 -o module_image_fuzz
//   ./module_image_fuzz corpus/ build/tests/unit/simgpu/kernels/
#include <cstddef>
#include <cstdint>

#include "module_image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;  // libFuzzer may pass a null pointer for empty input
  (void)gcr::simgpu::parse_module_image(data, size, 90);
  return 0;
}
