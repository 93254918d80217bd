// Note [podman archives restored for a network peer]
// runc restores a peer's container from a bundle this host's operator prepared (Note [Containers
// restored for a network peer] in container_host.h). `podman container restore --import` takes
// the container's whole configuration from the archive instead: its OCI spec (host paths it
// bind-mounts, capabilities, devices, namespaces, OCI hooks, which the runtime runs as root on the
// host), its image and its name. A peer with the token could send a configuration that reaches
// out of any container, so gcrd imports an archive for container NAME only where the operator
// allowed it: `--containers DIR`, and a file DIR/NAME/podman.conf saying what that container may
// be, one `key = value` a line ('#' starts a comment):
//
//   image = REF            an image it may run, as podman names it (at least one such line)
//   mount = /host/path     a host path it may bind-mount (or a directory above it)
//   capability = CAP_X     a capability beyond podman's default set
//   device = /dev/x        a device node it may have
//
// Before podman runs, gcrd reads the archive's config.dump and spec.dump (nothing is extracted:
// tar_members.h; links and pax headers are refused, so gcrd reads what podman will) and refuses,
// naming the reason, an archive whose container is not NAME, whose image is not listed, that is
// privileged, that uses podman volumes (named, overlay or image: a name is resolved on this host,
// and could be another container's data), that has an OCI hook, that has no pid, mount, ipc, uts or
// network namespace of its own (one joined by path: only a network namespace under /run/netns,
// podman's), that bind-mounts a host path not listed (podman's own files of the container,
// /etc/hosts, /etc/hostname, /etc/resolv.conf, /run/.containerenv and /dev/shm from its storage's
// userdata, pass: they are the container's own), whose capabilities go beyond podman's default set
// (containers.conf's default_capabilities as Debian ships it: 11) and the listed ones, or with a
// device not listed. Then the uids of its processes are checked as runc's
// are (Note [Who a peer may run]), from CRIU's core images in the archive. What this host still
// takes from the peer: the rest of the configuration (environment, resource limits, sysctls, the
// seccomp and AppArmor profiles, masked paths), the changes to the container's root file system
// that podman applies inside it, and CRIU's images, as for runc.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "gcr/result.h"

namespace gcr::gcrd {

struct PodmanAllowance {
  std::vector<std::string> images, mounts, capabilities, devices;
};

// DIR/NAME/podman.conf; Errc::not_found saying how to allow the container when it is missing.
Result<PodmanAllowance> read_podman_allowance(const std::filesystem::path& file);

// Checks the podman archive `archive` against `allowed` for container `name`, then writes its
// CRIU core images into the directory `core_dir` (for the uid check) and a copy of the archive
// with its gcr-checkpoint replaced by `reference` to `rewritten`.
Status prepare_podman_archive(const std::filesystem::path& archive, const std::string& name,
                              const PodmanAllowance& allowed, const std::string& reference,
                              const std::filesystem::path& core_dir,
                              const std::filesystem::path& rewritten);

}  // namespace gcr::gcrd
