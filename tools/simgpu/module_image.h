// Module images: what simgpu learns from the image a program hands to cuModuleLoadData,
// cuModuleLoadFatBinary or cuLibraryLoadData. Owns the public parse entry point and the parsed
// description (kernels with their parameter layout, __device__/__constant__ variables). Does not
// own loading: creating modules, allocating the variables or finding kernel twins is the caller's.
//
// The formats, with offsets, are in docs/simgpu-module-images.md. In short:
//   fatbin       magic 0xBA55ED50; a list of entries (ELF cubins per sm, PTX per compute_NN), each
//                optionally compressed (zstd by default for PTX in CUDA 13, LZ4 with
//                --compress-mode=speed). parse_module_image picks one entry by `device_sm`.
//   wrapper      __fatBinC_Wrapper_t (magic 0x466243B1), whose `data` points at a fatbin.
//   cubin        a CUDA ELF (e_machine 190): kernels are FUNC symbols marked STO_CUDA_ENTRY, their
//                parameters come from `.nv.info.<kernel>`, variables from `.nv.global[.init]` and
//                `.nv.constant<N>`.
//   PTX          NUL-terminated text: `.entry` parameter lists and module-scope `.global`/`.const`.
//
// All input is untrusted: every length, offset and count is checked against the image's declared
// size and `limit` before it is read. Errors are Errc::corrupt_image (malformed) or
// Errc::unsupported (well formed but beyond this parser), naming the field and its offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gcr/result.h"

namespace gcr::simgpu {

struct KernelParam {
  uint32_t ordinal;  // position in the C++ parameter list, from 0
  uint32_t offset;   // byte offset in the kernel's parameter buffer
  uint32_t size;     // bytes
  friend bool operator==(const KernelParam&, const KernelParam&) = default;
};

struct KernelInfo {
  std::string name;                 // as in the cubin symbol table / PTX .entry: mangled for C++
  std::vector<KernelParam> params;  // sorted by ordinal
  uint32_t param_bytes = 0;         // size of the whole parameter buffer
};

struct GlobalInfo {
  std::string name;  // __device__ and __constant__ variables (and __managed__ ones)
  uint64_t size = 0;
  std::vector<std::byte> init;  // `size` bytes, or empty = zero-filled
};

struct ModuleImage {
  std::vector<KernelInfo> kernels;
  std::vector<GlobalInfo> globals;
  int sm = 0;  // 90 for an sm_90 cubin; 0 if parsed from PTX
  bool from_ptx = false;
};

// Parses a fatbin, a __fatBinC_Wrapper_t, a cubin ELF or NUL-terminated PTX text.
//
// The driver API passes no size, so sizes come from the image's own headers; `limit` bounds the
// readable bytes when the caller knows it (SIZE_MAX otherwise). A wrapper's `data` pointer is
// followed only if it lies inside [image, image + limit) or `limit` is SIZE_MAX.
//
// `device_sm` (90 for sm_90) picks a fatbin entry: the cubin for exactly that sm, else the cubin
// with the highest sm <= device_sm, else the PTX entry with the highest compute_NN <= device_sm.
Result<ModuleImage> parse_module_image(const void* image, size_t limit, int device_sm);

}  // namespace gcr::simgpu
