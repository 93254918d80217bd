// An OCI runtime (runc) driven for a container's live migration (Note [Container migration] in
// cli/cmd_migrate.cpp): its state, a checkpoint through gcr's CRIU plugin on the source, a restore
// on the destination. The runtime runs the given CRIU, which loads gcr's plugin from
// `plugin_dir`; the plugin reaches the gcrd at `gcrd_socket` and the store `store`.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <string>

#include "gcr/result.h"

namespace gcr::gcrd {

struct ContainerRuntime {
  std::filesystem::path binary;       // runc
  std::filesystem::path criu;         // runc --criu
  std::filesystem::path plugin_dir;   // CRIU_LIBS_DIR for the runtime's CRIU
  std::filesystem::path gcrd_socket;  // GCR_GCRD_SOCKET for the plugin
  std::filesystem::path store;        // GCR_STORE for the plugin (empty: gcrd's default)
  std::filesystem::path driver;       // GCR_REAL_LIBCUDA for the plugin: gcrd's driver (empty: its
                                      // own search)
};

// NAME, a path, or empty ("runc") -> the runtime's executable, looked up in PATH.
Result<std::filesystem::path> find_container_runtime(const std::string& name);

// What runc allows in a container's name, with a length bound.
bool valid_container_name(const std::string& name);

struct ContainerState {
  pid_t pid = 0;
  std::string status;  // "running", "paused", "stopped", ...
  std::filesystem::path bundle;
};
Result<ContainerState> container_state(const ContainerRuntime& rt, const std::string& name);

// `runc checkpoint` into `images` (CRIU's log in `work`): the container ends after its dump. The
// plugin stores the device memory by reference in rt.store (never self-contained).
Status checkpoint_container(const ContainerRuntime& rt, const std::string& name,
                            const std::filesystem::path& images, const std::filesystem::path& work);

// `runc restore --detach` of `images` as container `name` from `bundle`; its CRIU's log in `work`.
Status restore_container(const ContainerRuntime& rt, const std::string& name,
                         const std::filesystem::path& bundle, const std::filesystem::path& images,
                         const std::filesystem::path& work);

}  // namespace gcr::gcrd
