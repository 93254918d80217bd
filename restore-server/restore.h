// The restore protocol of DESIGN.md §5, eager form: gcrd allocates every region on the target
// device and loads it from the store first (a restore that cannot get its memory fails before the
// process exists), CRIU restores the process with gcr's plugin (driver restore onto the mapped
// GPUs + unlock), and the process unparks: it maps gcrd's allocations at its original addresses
// and runs. --stop-copy images restore the baseline way (CRIU brings the device memory back in the
// process's pages and the driver copies it to the GPU).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "checkpoint.h"

namespace gcr::gcrd {

struct RestoreRequest {
  std::string name;           // tag or id
  std::optional<int> device;  // restore every GPU of the checkpoint onto this one
};

struct RestoreReport {
  pid_t pid = 0;
  std::string id;
  std::string kind;
  std::uint64_t region_bytes = 0;
  std::map<std::string, std::uint64_t> times_ns;  // load, materialize, criu, unpark, total
};

Result<RestoreReport> restore_checkpoint(store::Store& store, const criu::Tools& tools,
                                         const RestoreRequest& request, const Progress& progress);

}  // namespace gcr::gcrd
