// How gcr runs a container runtime (container_runtime.h): the environment that gives the
// runtime's CRIU gcr's plugin and settings, and one run with its output kept for the error.
// Shared by the runc and podman flavours; not part of gcrd-net's interface.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "container_runtime.h"
#include "gcr/result.h"

namespace gcr::gcrd {

// CRIU_LIBS_DIR, GCR_GCRD_SOCKET, GCR_STORE, GCR_REAL_LIBCUDA and GCR_CRIU_IMAGES=reference for
// the plugin in the runtime's CRIU (fields of `rt` left empty are left out).
std::map<std::string, std::string> plugin_env(const ContainerRuntime& rt);

// Runs `argv` with `env` added, its output appended to `log`. An error naming `what`, the exit
// status, the output's last lines and the errors of CRIU's log `criu_log` (when not empty).
Status run_runtime_command(const std::vector<std::string>& argv,
                           const std::map<std::string, std::string>& env,
                           const std::filesystem::path& log, const std::filesystem::path& criu_log,
                           const std::string& what);

// Runs `argv` and returns its output (stdout and stderr) and exit status.
struct CommandOutput {
  int status = -1;
  std::string text;
};
Result<CommandOutput> run_for_output(const std::vector<std::string>& argv);

}  // namespace gcr::gcrd
