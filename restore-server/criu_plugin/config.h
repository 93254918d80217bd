// The plugin's settings, read once from CRIU's environment at init (gcr sets them when it runs
// CRIU; a user running criu by hand exports them).
//
//   GCR_REAL_LIBCUDA     the driver, by absolute path (driver.h, Note [Which libcuda])
//   GCR_LOCK_TIMEOUT_MS  how long cuCheckpointProcessLock may wait for CUDA calls in flight to
//                        leave (default 10000, CRIU's --timeout default; the plugin cannot read
//                        --timeout itself, but never waits past CRIU's own alarm for it)
//   GCR_DEVICE_MAP       restore onto other GPUs (device_map.h)
//   GCR_LEAVE_RUNNING    1/0: whether the dumped tasks keep running (final_state.h)
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "device_map.h"
#include "gcr/result.h"

namespace gcr::criu_plugin {

struct Config {
  unsigned lock_timeout_ms = 10000;
  std::string device_map_text;
  std::vector<DevicePair> device_map;
  std::optional<bool> leave_running;
};

enum class Stage { dump, restore };

// Reads the variables the stage uses (dump: GCR_LOCK_TIMEOUT_MS, GCR_LEAVE_RUNNING; restore:
// GCR_DEVICE_MAP). Fails (invalid_argument, naming the variable) on a malformed value, so that a
// typo stops CRIU at init rather than doing something else than asked.
Result<Config> load_config(Stage stage);

}  // namespace gcr::criu_plugin
