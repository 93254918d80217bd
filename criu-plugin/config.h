// The plugin's settings, read once at init from CRIU's environment (gcr sets them when it runs
// CRIU; a user running criu by hand exports them) and from gcr.conf ($GCR_CONFIG, else
// /etc/gcr/gcr.conf: `KEY = VALUE` lines, `#` comments; the key in brackets below), for runtimes
// that pass CRIU no environment of their own (podman passes PATH and XDG_RUNTIME_DIR only). The
// environment wins over the file. docs/containers.md.
//
//   GCR_REAL_LIBCUDA [driver]
//                        the driver, by absolute path (driver.h, Note [Which libcuda])
//   GCR_LOCK_TIMEOUT_MS [lock_timeout_ms]
//                        how long cuCheckpointProcessLock may wait for CUDA calls in flight to
//                        leave (default 10000, CRIU's --timeout default; the plugin cannot read
//                        --timeout itself, but never waits past CRIU's own alarm for it)
//   GCR_DEVICE_MAP [device_map]       restore onto other GPUs (device_map.h)
//   GCR_LEAVE_RUNNING [leave_running] 1/0: whether the dumped tasks keep running (final_state.h)
//   GCR_GCRD_SOCKET [gcrd_socket]     where gcrd listens (default: gcrd's, /run/gcr/gcrd.sock)
//   GCR_STORE [store]                 gcrd's store for the device memory (default: gcrd's)
//   GCR_CRIU_IMAGES [criu_images]     reference (default): the images directory names a
//                                     checkpoint in the store; self-contained: it holds the
//                                     device memory itself (podman --export carries it)
//   GCR_PLUGIN_GCRD [gcrd]            on (default) / off: off never asks gcrd, so every CUDA
//                                     process gets the driver's checkpoint only (the baseline)
#pragma once

#include <filesystem>
#include <map>
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
  std::string driver;       // "" : the standard locations (driver.h)
  std::string gcrd_socket;  // "" : gcrd's default socket
  std::string store;        // "" : gcrd's default store
  bool self_contained = false;
  bool use_gcrd = true;
  std::string file;  // the gcr.conf read, if any
};

enum class Stage { dump, restore };

// Reads the variables the stage uses (dump: GCR_LOCK_TIMEOUT_MS, GCR_LEAVE_RUNNING; restore:
// GCR_DEVICE_MAP). Fails (invalid_argument, naming the variable) on a malformed value, so that a
// typo stops CRIU at init rather than doing something else than asked.
Result<Config> load_config(Stage stage);

// $GCR_CONFIG, else /etc/gcr/gcr.conf.
std::filesystem::path config_file_path();
// gcr.conf's text -> key/value; an unknown key or a line without '=' is an error naming
// `where` and the line.
Result<std::map<std::string, std::string>> parse_config_file(const std::string& text,
                                                             const std::string& where);

}  // namespace gcr::criu_plugin
