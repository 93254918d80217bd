// Whether the tasks of a dump keep running afterwards, from inside a plugin.
//
// Note [Leave running]
// exit(DUMP) must put every task it paused back in its initial CUDA state when the dump failed
// or the tasks keep running (--leave-running, --leave-stopped): a task left CHECKPOINTED or
// LOCKED blocks in its next CUDA call forever. CRIU keeps that choice in opts.final_state, which
// a plugin cannot read without CRIU's internal headers. So, in this order:
//   1. GCR_LEAVE_RUNNING=1 or 0, when set (gcr sets it whenever it runs CRIU), decides;
//   2. criu run as a command: -R/--leave-running or -s/--leave-stopped in /proc/self/cmdline or
//      in a configuration file CRIU reads (/etc/criu/default.conf, ~/.criu/default.conf,
//      $CRIU_CONFIG_FILE, --config FILE) means the tasks stay;
//   3. criu driven over RPC (`criu swrk`, `criu service`: runc, podman, CRIU's library) cannot be
//      told apart, so the plugin assumes they stay and restores them: a wasted device restore
//      before CRIU kills the tasks costs time, a wrong guess the other way hangs the application.
//      runc passes no environment of its own to CRIU and /etc/criu/runc.conf holds CRIU options,
//      not environment, so a runc user who wants the fast path exports GCR_LEAVE_RUNNING=0 into
//      runc's own environment (CRIU inherits it). Known gap: nothing better without CRIU's help.
// Short options bundled in one word ("-vR") are not recognised: set GCR_LEAVE_RUNNING with them.
// A post-dump script that fails also leaves the tasks running, with exit(DUMP, 0): not seen.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace gcr::criu_plugin {

enum class FinalState { killed, kept, unknown };

struct FinalStateGuess {
  FinalState state;
  std::string why;  // for the log
};

// argv: criu's command line (/proc/self/cmdline); home and env_config: $HOME and
// $CRIU_CONFIG_FILE (empty when unset).
FinalStateGuess guess_final_state(std::optional<bool> leave_running_env,
                                  const std::vector<std::string>& argv, const std::string& home,
                                  const std::string& env_config);

// The same, for this process.
FinalStateGuess guess_final_state(std::optional<bool> leave_running_env);

}  // namespace gcr::criu_plugin
