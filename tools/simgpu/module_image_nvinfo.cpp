// A kernel's `.nv.info.<kernel>` section: a packed list of attributes, from which this file takes
// the parameter layout. Owns the attribute record format and the parameter attributes; every
// other attribute (register count, exit offsets, ...) is skipped. Does not own finding the
// section (module_image_elf.cpp).
//
// Record: u8 format | u8 attribute | then, by format,
//   1 NVAL, 2 BVAL, 3 HVAL: a 2-byte value (4 bytes in all)
//   4 SVAL: u16 length, then `length` bytes
// Parameter attributes:
//   0x17 KPARAM_INFO (SVAL 12): u32 index | u16 ordinal | u16 offset | u32 bits: size in 31..18
//   0x45 KPARAM_INFO_V2 (SVAL 12, when the parameters pass ~4 KiB): u32 index | u16 ordinal
//        | u16 offset | u32 size
//   0x19 CBANK_PARAM_SIZE (HVAL): total parameter bytes
//   0x0a PARAM_CBANK (SVAL 8): u32 symbol | u16 bank offset | u16 total parameter bytes
// A kernel without parameters has none of these.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "module_image_internal.h"

namespace gcr::simgpu::detail {
namespace {

constexpr uint8_t kFmtNval = 1;
constexpr uint8_t kFmtBval = 2;
constexpr uint8_t kFmtHval = 3;
constexpr uint8_t kFmtSval = 4;

constexpr uint8_t kAttrParamCbank = 0x0a;
constexpr uint8_t kAttrKparamInfo = 0x17;
constexpr uint8_t kAttrCbankParamSize = 0x19;
constexpr uint8_t kAttrKparamInfoV2 = 0x45;

constexpr uint64_t kKparamInfoBytes = 12;
constexpr uint64_t kParamCbankBytes = 8;

}  // namespace

Status parse_kernel_nv_info(ByteView section, const std::string& where, KernelInfo& kernel) {
  std::optional<uint32_t> cbank_param_size;  // from 0x19
  std::optional<uint32_t> param_cbank_size;  // from 0x0a
  std::vector<KernelParam> params;

  uint64_t offset = 0;
  while (offset < section.size()) {
    std::string at = where + " attribute at offset " + hex(offset);
    if (!section.contains(offset, 4)) {
      return corrupt(at + ": needs 4 bytes, " + hex(section.size() - offset) + " left");
    }
    auto format = section.load<uint8_t>(offset);
    auto attribute = section.load<uint8_t>(offset + 1);
    uint64_t value_offset = offset + 2;
    uint64_t value_size = 2;
    if (format == kFmtSval) {
      value_offset = offset + 4;
      value_size = section.load<uint16_t>(offset + 2);
      if (!section.contains(value_offset, value_size)) {
        return corrupt(at + ": value length " + hex(value_size) + " beyond section size " +
                       hex(section.size()));
      }
    } else if (format != kFmtNval && format != kFmtBval && format != kFmtHval) {
      return corrupt(at + ": unknown format " + hex(format));
    }
    ByteView value = section.sub(value_offset, value_size);
    offset = value_offset + value_size;

    switch (attribute) {
      case kAttrKparamInfo:
      case kAttrKparamInfoV2: {
        if (format != kFmtSval || value.size() < kKparamInfoBytes) {
          return corrupt(at + ": KPARAM_INFO " + hex(attribute) + " needs a 12-byte value");
        }
        KernelParam p{};
        p.ordinal = value.load<uint16_t>(4);
        p.offset = value.load<uint16_t>(6);
        auto word = value.load<uint32_t>(8);
        p.size = attribute == kAttrKparamInfo ? word >> 18 : word;
        params.push_back(p);
        break;
      }
      case kAttrCbankParamSize:
        if (format != kFmtHval) return corrupt(at + ": CBANK_PARAM_SIZE is not a 2-byte value");
        cbank_param_size = value.load<uint16_t>(0);
        break;
      case kAttrParamCbank:
        if (format != kFmtSval || value.size() < kParamCbankBytes) {
          return corrupt(at + ": PARAM_CBANK needs an 8-byte value");
        }
        param_cbank_size = value.load<uint16_t>(6);
        break;
      default:
        break;
    }
  }

  std::sort(params.begin(), params.end(),
            [](const KernelParam& a, const KernelParam& b) { return a.ordinal < b.ordinal; });
  uint64_t end_of_params = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (i > 0 && params[i].ordinal == params[i - 1].ordinal) {
      return corrupt(where + ": parameter ordinal " + std::to_string(params[i].ordinal) +
                     " appears twice");
    }
    end_of_params = std::max<uint64_t>(end_of_params, uint64_t{params[i].offset} + params[i].size);
  }
  uint64_t total = cbank_param_size   ? *cbank_param_size
                   : param_cbank_size ? *param_cbank_size
                                      : end_of_params;
  if (end_of_params > total) {
    return corrupt(where + ": parameters end at " + hex(end_of_params) +
                   ", beyond the parameter size " + hex(total));
  }
  kernel.params = std::move(params);
  kernel.param_bytes = static_cast<uint32_t>(total);
  return ok();
}

}  // namespace gcr::simgpu::detail
