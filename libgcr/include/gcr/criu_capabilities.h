// What the CRIU gcr runs can do of what gcr's patches add (scripts/criu-patches,
// docs/criu-patches.md), learnt by asking the binary to do it, not from its name or a file beside
// it.
//
// Note [CRIU's capabilities probed]
// A distribution's CRIU lacks gcr's patches; gcr works with it, with fallbacks that cost time and
// a few refusals, and must say which. Each capability is probed for what it does, once per binary
// and kernel (the answers are kept in CRIU's kernel-probe directory, kdat_cache_dir(), under a
// name made of the binary's path, device, inode, size and modification time and the kernel's
// release, so that a rebuilt CRIU or a reboot into another kernel probes again):
// - cow-dump, cow-track, cow-dma, kdat-cache-dir: one live dump (-R) of a `sleep` of gcr's own,
//   with --cow-dump, --cow-track on a socket, --cow-dma over all of it and CRIU_KDAT_CACHE_DIR
//   naming an empty directory. Each is present when it did its work: the dump succeeded with the
//   option, the task's userfaultfd came back on the socket, CRIU's log counts the pages it copied
//   in the freeze, the kernel probe's cache appeared in the directory. An option this CRIU does
//   not know is dropped and the dump tried again without it.
// - terminal-onto-any-file, session-outside-pidns: a `sleep` whose session leader (a process of
//   gcr's own holding a pseudo-terminal) is outside the dumped tree, dumped as gcr dumps a program
//   started from a shell (--shell-job --external tty[...]) and restored as gcrd restores it, the
//   terminal inherited as /dev/null; and, as root, the same `sleep` in a pid namespace of its own
//   whose session leader is outside it, dumped. Not root (a pid namespace needs it), gcr takes
//   session-outside-pidns from set-up's record, as below: a non-root gcrd under a runner with no
//   session (a CI job) on gcr's CRIU must not refuse what that CRIU dumps.
// - unprivileged-bounding-set, shell-job-group, lazy-pages-pipelined: not probed (a restore in a
//   container's bounding set without CAP_SETPCAP, a restorer in a pid namespace whose group and
//   session are both 0, and a speed-up with no option: none can be set up in a few milliseconds);
//   present when set-up's record beside the binary says it was built with gcr's patches, and said
//   so ("from set-up's record").
// A probe that cannot run (no permission to dump, no `sleep`) says why and counts as absent.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "gcr/criu.h"
#include "gcr/process_tree.h"

namespace gcr::criu {

enum class Capability : std::size_t {
  terminal_onto_any_file,     // 0001
  session_outside_pidns,      // 0002
  unprivileged_bounding_set,  // 0003
  shell_job_group,            // 0004
  cow_dump,                   // 0005
  cow_track,                  // 0006
  cow_dma,                    // 0007
  lazy_pages_pipelined,       // 0008
  kdat_cache_dir,             // 0010
  count
};
inline constexpr std::size_t kCapabilities = static_cast<std::size_t>(Capability::count);

struct CapabilityInfo {
  const char* name;     // as gcr doctor lists it: "cow-dump"
  const char* patch;    // "0005-cow-dump.patch"
  const char* does;     // what it gives, in a few words
  const char* without;  // what gcr does without it, and what that costs
};
const CapabilityInfo& info(Capability c);
// The capability called `name` (as info() names it); false if none is.
bool capability_named(std::string_view name, Capability* out);

struct CapabilityState {
  bool present = false;
  bool probed = false;  // false: from set-up's record (see the Note)
  std::string seen;     // what the probe saw, in a line
};

class Capabilities {
 public:
  bool has(Capability c) const { return states_[static_cast<std::size_t>(c)].present; }
  const CapabilityState& state(Capability c) const { return states_[static_cast<std::size_t>(c)]; }
  CapabilityState& state(Capability c) { return states_[static_cast<std::size_t>(c)]; }
  // The line to print where a path falls back: "host memory written inside the freeze: this
  // CRIU lacks cow-dump (0005-cow-dump.patch; gcr doctor)".
  static std::string lacking(Capability c, std::string_view consequence);

 private:
  std::array<CapabilityState, kCapabilities> states_{};
};

// Fails, before anything is stopped, when this CRIU cannot dump `tree` or could not restore it
// (a terminal of a session outside the tree without terminal-onto-any-file, a session leader
// outside the pid namespace without session-outside-pidns), saying what to do instead.
Status dumpable_by(const ProcessTree& tree, const Capabilities& can);

// The capabilities of `criu`: from this process's memory, else the cache, else probed now (a few
// CRIU runs: 0.1-0.5 s). Never fails: a probe that cannot run counts as absent and says why.
const Capabilities& capabilities_of(const std::filesystem::path& criu);

// Probes `criu` now, without any cache (what capabilities_of() runs once).
Capabilities probe_capabilities(const std::filesystem::path& criu);

}  // namespace gcr::criu
