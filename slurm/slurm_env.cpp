// slurm_env.h.
#include "slurm_env.h"

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace gcr::slurm {
namespace {

Result<std::uint32_t> number(const EnvLookup& env, const char* name, bool required,
                             std::uint32_t fallback) {
  const char* text = env(name);
  const std::string v = text ? text : "";
  if (v.empty()) {
    if (!required) return fallback;
    return Error{Errc::invalid_argument,
                 std::string(name) +
                     " is not set: gcr slurm runs inside a Slurm job (srun --gcr, "
                     "sbatch --gcr), started by gcr's SPANK plugin"};
  }
  char* end = nullptr;
  unsigned long n = std::strtoul(v.c_str(), &end, 10);
  if (*end || n > 0xffffffffUL)
    return Error{Errc::invalid_argument, std::string(name) + "='" + v + "' is not a number"};
  return static_cast<std::uint32_t>(n);
}

Status parse_options(const std::string& text, SlurmEnv& e) {
  std::istringstream in(text);
  for (std::string o; std::getline(in, o, ',');) {
    if (o.empty() || o == "on") continue;
    if (o.starts_with("every=")) {
      e.every = o.substr(6);
    } else if (o.starts_with("signal=")) {
      auto s = parse_signal(o.substr(7));
      if (!s)
        return Error{Errc::invalid_argument, "--gcr=" + text + ": signal=" + o.substr(7) +
                                                 " is not a signal (USR1, USR2, or a number)"};
      e.signal = *s;
    } else {
      return Error{Errc::invalid_argument,
                   "--gcr=" + text + ": unknown option '" + o +
                       "' (every=DURATION: checkpoint each period too; signal=NAME: the --signal "
                       "that means checkpoint and requeue, USR1 by default)"};
    }
  }
  return ok();
}

}  // namespace

std::optional<int> parse_signal(const std::string& text) {
  std::string name = text.starts_with("SIG") ? text.substr(3) : text;
  if (name == "USR1") return SIGUSR1;
  if (name == "USR2") return SIGUSR2;
  if (name == "URG") return SIGURG;
  if (name == "HUP") return SIGHUP;
  if (name == "TERM") return SIGTERM;
  char* end = nullptr;
  long n = std::strtol(name.c_str(), &end, 10);
  if (name.empty() || *end || n < 1 || n > SIGRTMAX || n == SIGKILL || n == SIGSTOP)
    return std::nullopt;
  return static_cast<int>(n);
}

Result<SlurmEnv> read_slurm_env(bool task, const EnvLookup& lookup) {
  auto env = [&lookup](const char* name) {
    const char* v = lookup(name);
    return std::string(v ? v : "");
  };
  SlurmEnv e;
  GCR_TRY_ASSIGN(e.job, number(lookup, "SLURM_JOB_ID", true, 0));
  GCR_TRY_ASSIGN(e.restarts, number(lookup, "SLURM_RESTART_COUNT", false, 0));
  if (task) {
    GCR_TRY_ASSIGN(e.step, number(lookup, "SLURM_STEP_ID", true, 0));
    GCR_TRY_ASSIGN(e.procid, number(lookup, "SLURM_PROCID", true, 0));
    GCR_TRY_ASSIGN(e.node, number(lookup, "SLURM_NODEID", false, 0));
    GCR_TRY_ASSIGN(std::uint32_t all, number(lookup, "SLURM_NTASKS", false, 1));
    GCR_TRY_ASSIGN(e.ntasks, number(lookup, "SLURM_STEP_NUM_TASKS", false, all));
  }
  e.node_name = env("SLURMD_NODENAME");
  e.token_file = env("GCR_SLURM_TOKEN_FILE");
  e.store = env("GCR_SLURM_STORE");
  e.supervisor = env("GCR_SLURM_SUPERVISOR");
  e.key = env("GCR_SLURM_KEY");
  GCR_TRY(parse_options(env("GCR_SLURM_OPTIONS"), e));
  return e;
}

}  // namespace gcr::slurm
