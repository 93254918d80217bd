// A container runtime (runc, or podman) driven for a container's live migration (Note [Container
// migration] in cli/cmd_migrate.cpp): its state, a checkpoint through gcr's CRIU plugin on the
// source, a restore on the destination. The runtime runs the given CRIU, which loads gcr's plugin
// from `plugin_dir`; the plugin reaches the gcrd at `gcrd_socket` and the store `store`. runc is
// handed them in its environment, which it passes on to CRIU; podman passes CRIU only PATH, so it
// gets a directory first in PATH with a `criu` that sets them and runs the given CRIU (Note
// [podman's CRIU] in podman_runtime.h).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <string>

#include "gcr/result.h"

namespace gcr::gcrd {

// runc and runtimes that take its command line; podman (4), which keeps its own state of the
// container and checkpoints into one archive (`--export`).
enum class RuntimeKind { runc, podman };
const char* runtime_kind_name(RuntimeKind kind);  // "runc", "podman"
// A name of runtime_kind_name's; Errc::unsupported naming it otherwise.
Result<RuntimeKind> parse_runtime_kind(const std::string& name);

struct ContainerRuntime {
  std::filesystem::path binary;       // runc, or podman
  std::filesystem::path criu;         // runc --criu
  std::filesystem::path plugin_dir;   // CRIU_LIBS_DIR for the runtime's CRIU
  std::filesystem::path gcrd_socket;  // GCR_GCRD_SOCKET for the plugin
  std::filesystem::path store;        // GCR_STORE for the plugin (empty: gcrd's default)
  std::filesystem::path driver;       // GCR_REAL_LIBCUDA for the plugin: gcrd's driver (empty: its
                                      // own search)
  RuntimeKind kind = RuntimeKind::runc;
};

// podman's checkpoint of a container: the archive its images directory holds, all there is
// (`podman container checkpoint --export`), sent to the destination as the images are for runc.
inline constexpr const char* kPodmanArchiveName = "container.tar";

// NAME, a path, or empty ("runc") -> the runtime's executable, looked up in PATH.
Result<std::filesystem::path> find_container_runtime(const std::string& name);

// Which kind of runtime `binary` is, from what `binary --version` says (a wrapper script that runs
// podman with options of its own is podman too).
Result<RuntimeKind> container_runtime_kind(const std::filesystem::path& binary);

// What runc allows in a container's name, with a length bound.
bool valid_container_name(const std::string& name);

struct ContainerState {
  pid_t pid = 0;
  std::string status;            // "running", "paused", "stopped", ...
  std::filesystem::path bundle;  // runc's; podman keeps its own (empty)
};
Result<ContainerState> container_state(const ContainerRuntime& rt, const std::string& name);

// `runc checkpoint` into `images` (CRIU's log in `work`), or `podman container checkpoint
// --export images/container.tar --keep`: the container ends after its dump. The plugin stores the
// device memory by reference in rt.store (never self-contained).
Status checkpoint_container(const ContainerRuntime& rt, const std::string& name,
                            const std::filesystem::path& images, const std::filesystem::path& work);

// What gcr's plugin wrote into the checkpoint's images (kImagesReferenceName, gcrd_protocol.h):
// from `images` (runc), or from the archive there (podman). Errc::not_found when it wrote none.
Result<std::string> read_checkpoint_reference(const ContainerRuntime& rt,
                                              const std::filesystem::path& images);

// `runc restore --detach` of `images` as container `name` from `bundle`, or `podman container
// restore --import images/container.tar` (`bundle` unused: the archive holds the container's
// configuration); the runtime's output and runc's CRIU's log in `work`.
Status restore_container(const ContainerRuntime& rt, const std::string& name,
                         const std::filesystem::path& bundle, const std::filesystem::path& images,
                         const std::filesystem::path& work);

// The container checkpoint_container() stopped, back here after a migration failed: runc
// restores it from `images` and `bundle` as above; podman from the images its checkpoint kept
// (`podman container restore NAME`), the container still being podman's.
Status restore_checkpointed_container(const ContainerRuntime& rt, const std::string& name,
                                      const std::filesystem::path& bundle,
                                      const std::filesystem::path& images,
                                      const std::filesystem::path& work);
// The command line that does it, for a message to a person.
std::string restore_checkpointed_command(const ContainerRuntime& rt, const std::string& name,
                                         const std::filesystem::path& bundle,
                                         const std::filesystem::path& images);

// What the checkpoint left of the container here once the destination runs it: podman's stopped
// container (`podman rm`); runc's checkpoint left nothing.
Status remove_checkpointed_container(const ContainerRuntime& rt, const std::string& name,
                                     const std::filesystem::path& work);

}  // namespace gcr::gcrd
