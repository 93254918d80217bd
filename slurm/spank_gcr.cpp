// gcr's SPANK plugin (docs/slurm.md): `srun --gcr` / `sbatch --gcr` runs each task under gcr.
// Loaded by srun, sbatch and slurmstepd from plugstack.conf:
//
//   optional /usr/lib/x86_64-linux-gnu/slurm/gcr_spank.so [gcr=PATH] [token=FILE] [store=URL]
//                                                          [addresses=A.B.C.D/N]
//
// Note [gcr under Slurm]
// The plugin only starts things; gcr itself does the rest, so that the plugin's code in
// slurmstepd stays small and never blocks:
// - Every task of a step, and the batch script, is exec'd as `gcr slurm task|batch -- ARGV`
//   from task_init (the task's process just before Slurm's own exec, same pid, same
//   environment): the batch script's becomes its supervisor (cli/cmd_slurm.cpp, slurm/
//   supervisor.h), each task registers with it and is started under `gcr run`, or restored.
// - Job addresses (addresses=POOL): each node of a step gets an address of the job's own, a /32
//   taken by `gcr slurm address take` as root in task_init_privileged and given back in exit.
//   A rank that listens on and connects from it (GCR_SLURM_NODE_ADDR; rank 0's is
//   GCR_SLURM_MASTER_ADDR) keeps its connections when it is restored on another node: the
//   address moves with it, and the node it left no longer has it. Job J's block is the
//   (J mod blocks)-th run of 8 addresses in the pool: at most 8 nodes a step, and the pool's
//   size / 8 jobs at once.
// - exit (root, after the step's tasks): `gcr slurm reap` ends what a restored task left (a
//   restored rank is not the task's child, so Slurm's process tracking does not see it), and the
//   address is given back.
// No exceptions and no allocation that could throw: it runs inside Slurm's daemons.
#include <arpa/inet.h>
#include <dlfcn.h>
// spank.h declares the callbacks without C linkage of their own.
extern "C" {
#include <slurm/slurm.h>
#include <slurm/spank.h>
}
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

// SPANK_PLUGIN(gcr, 1), with the external linkage a const at namespace scope lacks in C++.
extern "C" {
extern const char plugin_name[] = "gcr";
extern const char plugin_type[] = "spank";
extern const unsigned int plugin_version = SLURM_VERSION_NUMBER;
extern const unsigned int spank_plugin_version = 1;
}

namespace {

struct Config {
  char gcr[512] = "";
  char token[512] = "";
  char store[1024] = "";
  std::uint32_t pool = 0;  // host order; 0: no job addresses
  unsigned pool_bits = 0;
};
Config config;
bool wanted = false;
char options[1024] = "";

int option_seen(int, const char* arg, int) {
  wanted = true;
  // Forwarded to slurmstepd, an option given without a value arrives as "(null)".
  std::snprintf(options, sizeof options, "%s", arg && std::strcmp(arg, "(null)") != 0 ? arg : "");
  if (std::strcmp(options, "off") == 0) wanted = false;
  return 0;
}

bool parse_pool(const char* text) {
  char ip[32];
  const char* slash = std::strchr(text, '/');
  if (!slash || static_cast<std::size_t>(slash - text) >= sizeof ip) return false;
  std::memcpy(ip, text, slash - text);
  ip[slash - text] = 0;
  in_addr a{};
  char* end = nullptr;
  long bits = std::strtol(slash + 1, &end, 10);
  if (inet_pton(AF_INET, ip, &a) != 1 || *end || bits < 8 || bits > 29) return false;
  config.pool = ntohl(a.s_addr);
  config.pool_bits = static_cast<unsigned>(bits);
  return true;
}

// Without gcr=: the gcr installed with this plugin, PREFIX/bin/gcr beside PREFIX/lib/gcr/slurm/
// (the build tree has the same shape).
void find_gcr() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&find_gcr), &info) || !info.dli_fname) return;
  char path[sizeof config.gcr - 16];  // room for "/bin/gcr"
  std::snprintf(path, sizeof path, "%s", info.dli_fname);
  for (int up = 0; up < 4; ++up)  // the file, slurm/, gcr/, lib/
    if (char* slash = std::strrchr(path, '/')) *slash = 0;
  std::snprintf(config.gcr, sizeof config.gcr, "%s/bin/gcr", path);
}

int parse_arguments(int ac, char** av) {
  find_gcr();
  for (int i = 0; i < ac; ++i) {
    const char* a = av[i];
    if (std::strncmp(a, "gcr=", 4) == 0) {
      std::snprintf(config.gcr, sizeof config.gcr, "%s", a + 4);
    } else if (std::strncmp(a, "token=", 6) == 0) {
      std::snprintf(config.token, sizeof config.token, "%s", a + 6);
    } else if (std::strncmp(a, "store=", 6) == 0) {
      std::snprintf(config.store, sizeof config.store, "%s", a + 6);
    } else if (std::strncmp(a, "addresses=", 10) == 0) {
      if (!parse_pool(a + 10)) {
        slurm_error("gcr: plugstack.conf: addresses=%s is not A.B.C.D/N (N from 8 to 29)", a + 10);
        return -1;
      }
    } else {
      slurm_error("gcr: plugstack.conf: unknown argument '%s' (gcr=, token=, store=, addresses=)",
                  a);
      return -1;
    }
  }
  return 0;
}

struct spank_option gcr_option = {
    const_cast<char*>("gcr"),
    const_cast<char*>("OPTIONS"),
    const_cast<char*>("Run every task under gcr (GPU checkpoint/restore): checkpointed at the "
                      "job's --signal and restored when the job is requeued (docs/slurm.md)"),
    2,
    0,
    option_seen};

bool is_batch(spank_t sp) {
  std::uint32_t step = 0;
  return spank_get_item(sp, S_JOB_STEPID, &step) == ESPANK_SUCCESS && step == SLURM_BATCH_SCRIPT;
}

// The job's address for the step's node `node` (Note [gcr under Slurm]), or 0.
std::uint32_t job_address(spank_t sp, std::uint32_t node) {
  std::uint32_t job = 0;
  if (!config.pool || node >= 8 || spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS) return 0;
  const std::uint32_t blocks = (1u << (32 - config.pool_bits)) / 8;
  return config.pool + (job % blocks) * 8 + node;
}

void text_of(std::uint32_t ip, char* out, std::size_t size) {
  in_addr a{htonl(ip)};
  if (!inet_ntop(AF_INET, &a, out, static_cast<socklen_t>(size))) std::snprintf(out, size, "?");
}

// Runs gcr with `args` (NULL-terminated, after argv[0]) and waits; 0 when it exited 0.
int run_gcr(const char* const* args) {
  const char* argv[12] = {config.gcr};
  int n = 1;
  for (; args[n - 1] && n < 11; ++n) argv[n] = args[n - 1];
  argv[n] = nullptr;
  pid_t child = fork();
  if (child < 0) return -1;
  if (child == 0) {
    execv(config.gcr, const_cast<char* const*>(argv));
    std::fprintf(stderr, "gcr: cannot run %s: %s\n", config.gcr, std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

void set_env(spank_t sp, const char* name, const char* value) {
  if (*value) spank_setenv(sp, name, value, 1);
}

}  // namespace

extern "C" {

int slurm_spank_init(spank_t sp, int ac, char** av) {
  if (parse_arguments(ac, av) != 0) return -1;
  if (spank_option_register(sp, &gcr_option) != ESPANK_SUCCESS) {
    slurm_error("gcr: cannot register --gcr");
    return -1;
  }
  return 0;
}

// Once per step on each node, as the user: what gcr slurm reads.
int slurm_spank_user_init(spank_t sp, int, char**) {
  if (!wanted) return 0;
  set_env(sp, "GCR_SLURM", "1");
  set_env(sp, "GCR_SLURM_OPTIONS", options);
  set_env(sp, "GCR_SLURM_TOKEN_FILE", config.token);
  set_env(sp, "GCR_SLURM_STORE", config.store);
  char text[32];
  std::uint32_t node = 0;
  if (std::uint32_t master = job_address(sp, 0)) {
    text_of(master, text, sizeof text);
    set_env(sp, "GCR_SLURM_MASTER_ADDR", text);
  }
  if (!is_batch(sp) && spank_get_item(sp, S_JOB_NODEID, &node) == ESPANK_SUCCESS)
    if (std::uint32_t mine = job_address(sp, node)) {
      text_of(mine, text, sizeof text);
      set_env(sp, "GCR_SLURM_NODE_ADDR", text);
    }
  return 0;
}

// In each task, as root, before it becomes the user: the node's job address.
int slurm_spank_task_init_privileged(spank_t sp, int, char**) {
  if (!wanted || is_batch(sp)) return 0;
  std::uint32_t node = 0;
  if (spank_get_item(sp, S_JOB_NODEID, &node) != ESPANK_SUCCESS) return 0;
  std::uint32_t mine = job_address(sp, node);
  if (!mine) return 0;
  char text[32];
  text_of(mine, text, sizeof text);
  const char* args[] = {"slurm", "address", "take", text, nullptr};
  if (run_gcr(args) != 0) {
    slurm_error("gcr: could not give this node the job's address %s (gcr slurm address take)",
                text);
    return -1;
  }
  return 0;
}

// In each task, as the user, just before Slurm would exec it: gcr runs it instead.
int slurm_spank_task_init(spank_t sp, int, char**) {
  if (!wanted) return 0;
  int argc = 0;
  char** argv = nullptr;
  char** env = nullptr;
  if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS) {
    slurm_error("gcr: cannot read the task's command and environment");
    return -1;
  }
  const char** wrapped = static_cast<const char**>(std::calloc(argc + 5, sizeof(char*)));
  if (!wrapped) return -1;
  wrapped[0] = config.gcr;
  wrapped[1] = "slurm";
  wrapped[2] = is_batch(sp) ? "batch" : "task";
  wrapped[3] = "--";
  for (int i = 0; i < argc; ++i) wrapped[4 + i] = argv[i];
  execve(config.gcr, const_cast<char* const*>(wrapped), env);
  slurm_error("gcr: cannot run %s: %m (plugstack.conf's gcr=)", config.gcr);
  std::free(wrapped);
  return -1;
}

// After the step's tasks, as root: what restored tasks left, and the job's address.
int slurm_spank_exit(spank_t sp, int, char**) {
  if (!wanted || !spank_remote(sp) || is_batch(sp)) return 0;
  std::uint32_t job = 0, step = 0, node = 0;
  uid_t uid = 0;
  if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS)
    return 0;
  char job_text[16], step_text[16], uid_text[16];
  std::snprintf(job_text, sizeof job_text, "%u", job);
  std::snprintf(step_text, sizeof step_text, "%u", step);
  std::snprintf(uid_text, sizeof uid_text, "%u", static_cast<unsigned>(uid));
  const char* reap[] = {"slurm", "reap", job_text, step_text, uid_text, nullptr};
  if (run_gcr(reap) != 0) slurm_error("gcr: gcr slurm reap %u %u failed", job, step);
  if (spank_get_item(sp, S_JOB_NODEID, &node) == ESPANK_SUCCESS)
    if (std::uint32_t mine = job_address(sp, node)) {
      char text[32];
      text_of(mine, text, sizeof text);
      const char* release[] = {"slurm", "address", "release", text, nullptr};
      if (run_gcr(release) != 0) slurm_error("gcr: could not release the job's address %s", text);
    }
  return 0;
}

}  // extern "C"
