// GCR_DEVICE_MAP: which GPU each checkpointed GPU is restored onto (cuCheckpointProcessRestore's
// gpuPairs). Pure parsing; turning ordinals into UUIDs needs the driver (device_steps.cpp).
//
//   GCR_DEVICE_MAP=0=1,1=0                       by ordinal, as the restoring host numbers them
//   GCR_DEVICE_MAP=GPU-5349...=GPU-5349...       by UUID (nvidia-smi -L's form; dashes optional)
//
// The two forms mix freely. The driver requires the pairs to name every GPU the process used:
// a map is complete or the restore fails (it does not fill in identity pairs, which could collide
// with a listed target).
#pragma once

#include <cuda.h>

#include <string>
#include <string_view>
#include <vector>

#include "gcr/result.h"

namespace gcr::criu_plugin {

// One side of a pair: an ordinal, or a UUID given as text.
struct DeviceRef {
  int ordinal = -1;  // >= 0 when given by ordinal
  CUuuid uuid{};     // when ordinal < 0
  std::string text;  // as written, for messages
};

struct DevicePair {
  DeviceRef from;
  DeviceRef to;
};

// Parses "A=B[,C=D...]". Fails (invalid_argument, naming the entry) on an empty or malformed
// entry, a bad UUID, or a device named twice as a source or twice as a target.
Result<std::vector<DevicePair>> parse_device_map(std::string_view text);

// "GPU-" + 32 hex digits (dashes optional; the prefix optional) -> CUuuid.
Result<CUuuid> parse_uuid(std::string_view text);

// nvidia-smi's form: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
std::string format_uuid(const CUuuid& uuid);

}  // namespace gcr::criu_plugin
