// Description: gcr's CRIU plugin loaded and driven without CRIU (no root needed): its descriptor,
// and its hooks on live simgpu processes. Outside CRIU nothing is ptrace-stopped, so the restore
// thread runs anyway (Note [Restore thread], the ESRCH case) and CRIU's exports are absent (the
// weak symbols stay null): what is left is the plugin's own logic against the driver API.
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <cuda.h>

#include "gcr/multiarch.h"

extern "C" {
#include <criu/criu-plugin.h>
}

namespace {

using namespace std::chrono_literals;

struct Plugin {
  void* handle = nullptr;
  cr_plugin_desc_t* desc = nullptr;
  Plugin() {
    handle = dlopen(GCR_TEST_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    if (!handle) FAIL("dlopen " GCR_TEST_PLUGIN ": " << dlerror());
    desc = static_cast<cr_plugin_desc_t*>(dlsym(handle, "CR_PLUGIN_DESC"));
    REQUIRE(desc);
  }
  ~Plugin() {
    if (handle) dlclose(handle);
  }
  int hook(int id, int pid) { return reinterpret_cast<int (*)(int)>(desc->hooks[id])(pid); }
};

// simgpu's caller side of the checkpoint API, to look at (and prepare) the processes' state.
struct Sim {
  CUresult (*get_state)(int, CUprocessState*);
  CUresult (*lock)(int, CUcheckpointLockArgs*);
  CUresult (*checkpoint)(int, CUcheckpointCheckpointArgs*);
  Sim() {
    void* h = dlopen(GCR_TEST_SIMGPU, RTLD_NOW | RTLD_LOCAL);
    REQUIRE(h);
    get_state = reinterpret_cast<decltype(get_state)>(dlsym(h, "cuCheckpointProcessGetState"));
    lock = reinterpret_cast<decltype(lock)>(dlsym(h, "cuCheckpointProcessLock"));
    checkpoint = reinterpret_cast<decltype(checkpoint)>(dlsym(h, "cuCheckpointProcessCheckpoint"));
    REQUIRE((get_state && lock && checkpoint));
  }
  int state(int pid) {
    CUprocessState s{};
    return get_state(pid, &s) == CUDA_SUCCESS ? static_cast<int>(s) : -1;
  }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int last_step(const std::string& text) {
  int n = -1;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line))
    if (line.rfind("step ", 0) == 0) n = std::atoi(line.c_str() + 5);
  return n;
}

std::string checksum_of(const std::string& text) {
  auto at = text.find("\nchecksum ");
  return at == std::string::npos ? "" : text.substr(at + 10, text.find('\n', at + 10) - at - 10);
}

// A child process, killed if the test leaves it running.
struct Child {
  pid_t pid = -1;
  std::string out;
  ~Child() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  int wait_exit() {
    int status = 0;
    waitpid(pid, &status, 0);
    pid = -1;
    return status;
  }
};

void spawn(Child& c, const std::vector<std::string>& argv, const std::string& out) {
  c.out = out;
  c.pid = fork();
  REQUIRE(c.pid >= 0);
  if (c.pid == 0) {
    int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0);
    setenv("LD_LIBRARY_PATH", GCR_TEST_SIMGPU_DIR, 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
}

const std::vector<std::string> kMlp = {GCR_TEST_MLP, "--steps", "60", "--footprint", "16M"};

std::string tmp_path(const char* name) {
  return std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
         "/gcr-plugin-hooks-" + std::to_string(getpid()) + "-" + name;
}

// The uninterrupted checksum, computed once.
const std::string& baseline() {
  static const std::string sum = [] {
    Child c;
    spawn(c, kMlp, tmp_path("baseline.out"));
    c.wait_exit();
    std::string s = checksum_of(read_file(c.out));
    std::remove(c.out.c_str());
    return s;
  }();
  return sum;
}

void start_mlp(Child& c, const char* name) {
  auto argv = kMlp;
  argv.insert(argv.end(), {"--step-delay-ms", "20"});
  spawn(c, argv, tmp_path(name));
  for (int i = 0; i < 400 && last_step(read_file(c.out)) < 5; ++i)
    std::this_thread::sleep_for(10ms);
  REQUIRE(last_step(read_file(c.out)) >= 5);
}

// Waits for the workload and returns its checksum; exit_ok says whether it also exited 0.
std::string finish(Child& c, bool* exit_ok = nullptr) {
  int status = c.wait_exit();
  bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (exit_ok)
    *exit_ok = ok;
  else
    CHECK(ok);
  std::string sum = checksum_of(read_file(c.out));
  std::remove(c.out.c_str());
  return sum;
}

struct Env {
  Env() {
    setenv("GCR_REAL_LIBCUDA", GCR_TEST_SIMGPU_DIR "/libcuda.so.1", 1);
    setenv("SIMGPU_DEVICES", "2", 1);
    setenv("SIMGPU_MEMORY", "1G", 1);
    unsetenv("GCR_DEVICE_MAP");
    unsetenv("GCR_LEAVE_RUNNING");
  }
};

}  // namespace

TEST_CASE(
    "the plugin exports its descriptor, built for the CRIU whose header it was compiled with") {
  Env env;
  Plugin p;
  CHECK(std::string(p.desc->name) == "gcr_criu_plugin");
  CHECK(p.desc->version == CRIU_PLUGIN_VERSION);
  CHECK(p.desc->max_hooks == CR_PLUGIN_HOOK__MAX);
  CHECK(p.desc->init);
  CHECK(p.desc->exit);
  CHECK(p.desc->hooks[CR_PLUGIN_HOOK__PAUSE_DEVICES]);
  CHECK(p.desc->hooks[CR_PLUGIN_HOOK__CHECKPOINT_DEVICES]);
  CHECK(p.desc->hooks[CR_PLUGIN_HOOK__RESUME_DEVICES_LATE]);
  for (int id : {CR_PLUGIN_HOOK__DUMP_UNIX_SK, CR_PLUGIN_HOOK__DUMP_EXT_FILE,
                 CR_PLUGIN_HOOK__HANDLE_DEVICE_VMA, CR_PLUGIN_HOOK__UPDATE_VMA_MAP,
                 CR_PLUGIN_HOOK__POST_FORKING})
    CHECK_FALSE(p.desc->hooks[id]);
  // Nothing else is visible: libgcr and the plugin's own names stay local (exports.map).
  for (const char* internal :
       {"_ZN3gcr11errno_errorERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEi", "to_errno",
        "gcr_plugin_init"})
    CHECK_FALSE(dlsym(p.handle, internal));
}

TEST_CASE(
    "pre-dump and a driver without the checkpoint API disable the plugin: every hook is not mine") {
  Env env;
  Child sleeper;
  spawn(sleeper, {"/bin/sleep", "5"}, "/dev/null");
  {
    Plugin p;
    REQUIRE(p.desc->init(CR_PLUGIN_STAGE__PRE_DUMP) == 0);
    CHECK(p.hook(CR_PLUGIN_HOOK__PAUSE_DEVICES, sleeper.pid) == -ENOTSUP);
    p.desc->exit(CR_PLUGIN_STAGE__PRE_DUMP, 0);
  }
  for (const char* p : {GCR_MULTIARCH_LIBDIR "/libcuda.so.1", "/usr/lib64/libcuda.so.1",
                        "/usr/lib/libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1",
                        "/usr/lib/wsl/lib/libcuda.so.1", "/usr/local/cuda/compat/libcuda.so.1"})
    if (access(p, F_OK) == 0) return;  // a real driver here would be found after the bad path
  setenv("GCR_REAL_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
  Plugin p;
  REQUIRE(p.desc->init(CR_PLUGIN_STAGE__DUMP) == 0);
  CHECK(p.hook(CR_PLUGIN_HOOK__PAUSE_DEVICES, sleeper.pid) == -ENOTSUP);
  CHECK(p.hook(CR_PLUGIN_HOOK__CHECKPOINT_DEVICES, sleeper.pid) == -ENOTSUP);
  p.desc->exit(CR_PLUGIN_STAGE__DUMP, 0);
}

#ifdef GCR_TEST_INTERPOSER
TEST_CASE("gcr's interposer, also named libcuda.so.1, is never taken for the driver") {
  Env env;
  for (const char* p : {GCR_MULTIARCH_LIBDIR "/libcuda.so.1", "/usr/lib64/libcuda.so.1",
                        "/usr/lib/libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1",
                        "/usr/lib/wsl/lib/libcuda.so.1", "/usr/local/cuda/compat/libcuda.so.1"})
    if (access(p, F_OK) == 0) return;  // a real driver here would be found after the interposer
  Sim sim;
  Child mlp;
  start_mlp(mlp, "interposer.out");
  setenv("GCR_REAL_LIBCUDA", GCR_TEST_INTERPOSER, 1);
  Plugin p;
  REQUIRE(p.desc->init(CR_PLUGIN_STAGE__DUMP) == 0);  // disabled: no driver
  CHECK(p.hook(CR_PLUGIN_HOOK__PAUSE_DEVICES, mlp.pid) == -ENOTSUP);
  CHECK(sim.state(mlp.pid) == CU_PROCESS_STATE_RUNNING);
  p.desc->exit(CR_PLUGIN_STAGE__DUMP, 0);
  CHECK(p.desc->init(CR_PLUGIN_STAGE__RESTORE) != 0);  // a restore that needs a driver fails
  std::remove(tmp_path("interposer.out").c_str());
}
#endif

TEST_CASE("a malformed setting makes init fail rather than do something else than asked") {
  Env env;
  setenv("GCR_LOCK_TIMEOUT_MS", "ten", 1);
  Plugin p;
  CHECK(p.desc->init(CR_PLUGIN_STAGE__DUMP) != 0);
  unsetenv("GCR_LOCK_TIMEOUT_MS");
}

TEST_CASE(
    "dump side: pause locks, checkpoint checkpoints, and exit after a failed dump gives the "
    "process back, which then ends with the uninterrupted checksum") {
  Env env;
  Sim sim;
  const std::string want = baseline();
  REQUIRE(!want.empty());
  Child sleeper;
  spawn(sleeper, {"/bin/sleep", "5"}, "/dev/null");
  Child mlp;
  start_mlp(mlp, "dump.out");

  Plugin p;
  REQUIRE(p.desc->init(CR_PLUGIN_STAGE__DUMP) == 0);
  CHECK(p.hook(CR_PLUGIN_HOOK__PAUSE_DEVICES, sleeper.pid) == -ENOTSUP);
  REQUIRE(p.hook(CR_PLUGIN_HOOK__PAUSE_DEVICES, mlp.pid) == 0);
  CHECK(sim.state(mlp.pid) == CU_PROCESS_STATE_LOCKED);
  int at = last_step(read_file(mlp.out));
  std::this_thread::sleep_for(200ms);
  CHECK(last_step(read_file(mlp.out)) <= at + 1);  // blocked in its next CUDA call

  CHECK(p.hook(CR_PLUGIN_HOOK__CHECKPOINT_DEVICES, sleeper.pid) == -ENOTSUP);
  REQUIRE(p.hook(CR_PLUGIN_HOOK__CHECKPOINT_DEVICES, mlp.pid) == 0);
  CHECK(sim.state(mlp.pid) == CU_PROCESS_STATE_CHECKPOINTED);

  p.desc->exit(CR_PLUGIN_STAGE__DUMP, -1);  // the dump failed
  CHECK(sim.state(mlp.pid) == CU_PROCESS_STATE_RUNNING);
  CHECK(finish(mlp) == want);
}

TEST_CASE("dump side: after a dump whose tasks CRIU kills, exit leaves them checkpointed") {
  Env env;
  Sim sim;
  Child mlp;
  start_mlp(mlp, "killed.out");
  setenv("GCR_LEAVE_RUNNING", "0", 1);
  Plugin p;
  REQUIRE(p.desc->init(CR_PLUGIN_STAGE__DUMP) == 0);
  REQUIRE(p.hook(CR_PLUGIN_HOOK__PAUSE_DEVICES, mlp.pid) == 0);
  REQUIRE(p.hook(CR_PLUGIN_HOOK__CHECKPOINT_DEVICES, mlp.pid) == 0);
  p.desc->exit(CR_PLUGIN_STAGE__DUMP, 0);
  CHECK(sim.state(mlp.pid) == CU_PROCESS_STATE_CHECKPOINTED);
  std::remove(tmp_path("killed.out").c_str());
}

TEST_CASE("dump side: a process locked before the dump is checkpointed and put back locked") {
  Env env;
  Sim sim;
  Child mlp;
  start_mlp(mlp, "locked.out");
  CUcheckpointLockArgs args{};
  REQUIRE(sim.lock(mlp.pid, &args) == CUDA_SUCCESS);

  setenv("GCR_LEAVE_RUNNING", "1", 1);  // read at init
  Plugin p;
  REQUIRE(p.desc->init(CR_PLUGIN_STAGE__DUMP) == 0);
  REQUIRE(p.hook(CR_PLUGIN_HOOK__PAUSE_DEVICES, mlp.pid) == 0);
  REQUIRE(p.hook(CR_PLUGIN_HOOK__CHECKPOINT_DEVICES, mlp.pid) == 0);
  CHECK(sim.state(mlp.pid) == CU_PROCESS_STATE_CHECKPOINTED);
  p.desc->exit(CR_PLUGIN_STAGE__DUMP, 0);
  CHECK(sim.state(mlp.pid) == CU_PROCESS_STATE_LOCKED);
  std::remove(tmp_path("locked.out").c_str());
}

TEST_CASE("restore side: RESUME_DEVICES_LATE restores onto GCR_DEVICE_MAP's GPU and unlocks") {
  Env env;
  Sim sim;
  const std::string want = baseline();
  Child sleeper;
  spawn(sleeper, {"/bin/sleep", "5"}, "/dev/null");
  Child mlp;
  start_mlp(mlp, "restore.out");
  CUcheckpointLockArgs lock{};
  CUcheckpointCheckpointArgs ckpt{};
  REQUIRE(sim.lock(mlp.pid, &lock) == CUDA_SUCCESS);
  REQUIRE(sim.checkpoint(mlp.pid, &ckpt) == CUDA_SUCCESS);

  setenv("GCR_DEVICE_MAP", "0=1", 1);
  Plugin p;
  REQUIRE(p.desc->init(CR_PLUGIN_STAGE__RESTORE) == 0);  // no inventory outside CRIU: enabled
  CHECK(p.hook(CR_PLUGIN_HOOK__RESUME_DEVICES_LATE, sleeper.pid) == -ENOTSUP);
  REQUIRE(p.hook(CR_PLUGIN_HOOK__RESUME_DEVICES_LATE, mlp.pid) == 0);
  CHECK(sim.state(mlp.pid) == CU_PROCESS_STATE_RUNNING);
  p.desc->exit(CR_PLUGIN_STAGE__RESTORE, 0);
  // Only the checksum: simgpu moves the process's contexts to device 1, so the workload's closing
  // cuDevicePrimaryCtxRelease(0) fails (CUDA_ERROR_INVALID_CONTEXT, exit 2) after the results are
  // out. A real driver keeps the process's ordinals: after a migration cuDeviceGetUuid(0) in the
  // process names the new GPU (NVIDIA/cuda-checkpoint#48). A simgpu fidelity gap, reported.
  bool exit_ok = false;
  CHECK(finish(mlp, &exit_ok) == want);
  if (!exit_ok) WARN("the workload exited non-zero after a restore onto another device (simgpu)");
}

TEST_CASE("restore side: a restore the driver refuses kills the task instead of resuming it") {
  Env env;
  Sim sim;
  Child mlp;
  start_mlp(mlp, "refused.out");
  CUcheckpointLockArgs lock{};
  CUcheckpointCheckpointArgs ckpt{};
  REQUIRE(sim.lock(mlp.pid, &lock) == CUDA_SUCCESS);
  REQUIRE(sim.checkpoint(mlp.pid, &ckpt) == CUDA_SUCCESS);

  setenv("GCR_DEVICE_MAP", "GPU-00000000-0000-0000-0000-000000000000=1", 1);
  Plugin p;
  REQUIRE(p.desc->init(CR_PLUGIN_STAGE__RESTORE) == 0);
  CHECK(p.hook(CR_PLUGIN_HOOK__RESUME_DEVICES_LATE, mlp.pid) < 0);
  p.desc->exit(CR_PLUGIN_STAGE__RESTORE, 0);
  int status = mlp.wait_exit();
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  std::remove(tmp_path("refused.out").c_str());
}

// Note [Lazy-pages daemon started beside the restore]: with GCR_RESTORE_GO_FD, init says it waits
// ('w') and waits for gcrd's go; the socket closed without one fails the restore before CRIU
// makes any process.
TEST_CASE("restore side: init waits for gcrd's go when started beside the lazy-pages daemon") {
  Env env;
  for (bool go : {true, false}) {
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    setenv("GCR_RESTORE_GO_FD", std::to_string(sv[1]).c_str(), 1);
    char said = 0;
    std::thread gcrd([&] {  // reads the 'w', then answers 200 ms later
      (void)!read(sv[0], &said, 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (go) (void)!send(sv[0], "g", 1, MSG_NOSIGNAL);
      close(sv[0]);
    });
    Plugin p;
    auto t0 = std::chrono::steady_clock::now();
    int rc = p.desc->init(CR_PLUGIN_STAGE__RESTORE);
    auto waited = std::chrono::steady_clock::now() - t0;
    gcrd.join();
    CHECK((rc == 0) == go);
    CHECK(said == 'w');
    CHECK(waited >= std::chrono::milliseconds(150));
    CHECK(getenv("GCR_RESTORE_GO_FD") == nullptr);  // taken once, not passed on
    if (rc == 0) p.desc->exit(CR_PLUGIN_STAGE__RESTORE, 0);
  }
  setenv("GCR_RESTORE_GO_FD", "1", 1);  // not a socket: refused, nothing read from stdout
  Plugin p;
  CHECK(p.desc->init(CR_PLUGIN_STAGE__RESTORE) != 0);
}
