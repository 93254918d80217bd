// podman's flavour of container_runtime.h: the same operations, spoken as podman 4 takes them.
// Private to gcrd-net (container_runtime.cpp calls it for RuntimeKind::podman).
//
// Note [podman's CRIU]
// podman runs the `criu` first in PATH (through runc, and for its own version check) and hands
// the runtime only PATH and XDG_RUNTIME_DIR of its environment, so the settings gcr gives runc's
// CRIU in the environment (CRIU_LIBS_DIR, GCR_GCRD_SOCKET, GCR_STORE, GCR_REAL_LIBCUDA,
// GCR_CRIU_IMAGES=reference) cannot reach it that way. gcr writes a `criu` into `WORK/bin` (the
// operation's private directory, 0700, root's) that exports them and runs gcr's CRIU, and runs
// podman with that directory first in PATH. The plugin's settings that the environment does not
// give still come from gcr.conf; the environment wins, so a gcr.conf that says `criu_images =
// self-contained` (for --export by hand) does not make the migration carry the device memory in
// the archive.
#pragma once

#include <filesystem>
#include <string>

#include "container_runtime.h"
#include "gcr/result.h"

namespace gcr::gcrd {

Result<ContainerState> podman_state(const ContainerRuntime& rt, const std::string& name);
// `podman container checkpoint --export IMAGES/container.tar --compress none --keep NAME`.
Status podman_checkpoint(const ContainerRuntime& rt, const std::string& name,
                         const std::filesystem::path& images, const std::filesystem::path& work);
// checkpoint/gcr-checkpoint of IMAGES/container.tar; Errc::not_found when there is none.
Result<std::string> podman_reference(const std::filesystem::path& images);
// `podman container restore --import IMAGES/container.tar`.
Status podman_import(const ContainerRuntime& rt, const std::string& name,
                     const std::filesystem::path& images, const std::filesystem::path& work);
// `podman container restore NAME`: from the images the checkpoint kept.
Status podman_restore_kept(const ContainerRuntime& rt, const std::string& name,
                           const std::filesystem::path& work);
// `podman rm NAME`.
Status podman_remove(const ContainerRuntime& rt, const std::string& name,
                     const std::filesystem::path& work);

}  // namespace gcr::gcrd
