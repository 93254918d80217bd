// Which tree this CRIU dumps, known at init(DUMP) — before CRIU chooses between the cgroup freezer
// and ptrace interrupts for seizing it (Note [Seizing per dump]).
//
// Note [Seizing per dump]
// The plugin needs ptrace interrupts (set_compel_interrupt_only_mode) for a CUDA process: a task
// frozen by the cgroup freezer could not run its restore thread (Note [Restore thread]). But that
// mode also thaws a frozen container during its dump, and costs trees without CUDA what the
// freezer is for (CRIU's zdtm transition/thread-bomb fails under --freeze-cgroup with it). CRIU
// chooses at the root's seize, after init, so the plugin decides at init, per dump: interrupts
// only when a process of the tree maps a CUDA driver. The root comes from CRIU's command line
// (-t/--tree) when it has one; under `criu swrk` (runc, podman: the root arrives by RPC) from
// CRIU's own root_item, which CRIU 4.2 sets before init and exports (its layout is mirrored in
// dump_root.cpp, for the CRIU whose header the plugin is built against). Unknown: interrupts, as
// before.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace gcr::criu_plugin {

// -t PID / --tree PID / --tree=PID / -tPID in a NUL-separated command line; none if absent.
std::optional<pid_t> tree_from_cmdline(const std::string& cmdline);

// The root of this dump: the command line's, else CRIU's root_item; none if neither says. At the
// end of a restore, root_item's is the restored root's pid as CRIU sees it.
std::optional<pid_t> dump_root();

// Whether some process of the tree under root maps a CUDA driver (libcuda.so*, gcr's
// interposer or simgpu included).
bool tree_uses_cuda(pid_t root);

}  // namespace gcr::criu_plugin
