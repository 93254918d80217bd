#include "common.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>

#include "emulator.h"
#include "probe_kernels_fatbin.h"

extern char** environ;

namespace ipt {

std::string interposer_path() {
  return GCR_TEST_INTERPOSER;
}
std::string simgpu_path() {
  return GCR_TEST_SIMGPU;
}
std::string mlp_train_path() {
  return GCR_TEST_MLP_TRAIN;
}

namespace {

std::vector<std::string> with(std::vector<std::string> env, const std::vector<std::string>& extra) {
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

std::string dir_of(const std::string& path) {
  return path.substr(0, path.rfind('/'));
}

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  return realpath(p.c_str(), buf) ? std::string(buf) : p;
}

}  // namespace

std::vector<std::string> gcr_env(const std::vector<std::string>& extra) {
  return with({"LD_PRELOAD=" + interposer_path(), "GCR_REAL_LIBCUDA=" + simgpu_path(),
               "SIMGPU_DEVICES=2", "SIMGPU_MEMORY=2G"},
              extra);
}

std::vector<std::string> plain_env(const std::vector<std::string>& extra) {
  return with({"LD_LIBRARY_PATH=" + dir_of(simgpu_path()), "SIMGPU_DEVICES=2", "SIMGPU_MEMORY=2G"},
              extra);
}

std::string cu(CUresult r) {
  const char* name = nullptr;
  if (cuGetErrorName(r, &name) == CUDA_SUCCESS && name) return name;
  return "CUresult(" + std::to_string(static_cast<int>(r)) + ")";
}

bool under_gcr() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&cuInit), &info) || !info.dli_fname) return false;
  return real_path(info.dli_fname) == real_path(interposer_path());
}

void require_under_gcr() {
  if (!under_gcr())
    FAIL(
        "this test checks the process it runs in, which must run under gcr: run it through ctest, "
        "or "
        "with LD_PRELOAD="
        << interposer_path() << " GCR_REAL_LIBCUDA=" << simgpu_path());
}

CUcontext use_device(int ordinal) {
  static CUcontext contexts[2] = {};
  static std::mutex mu;
  std::lock_guard lock(mu);
  REQUIRE((ordinal == 0 || ordinal == 1));
  if (!contexts[ordinal]) {
    CU_OK(cuInit(0));
    CUdevice dev;
    CU_OK(cuDeviceGet(&dev, ordinal));
    CU_OK(cuDevicePrimaryCtxRetain(&contexts[ordinal], dev));
  }
  CU_OK(cuCtxSetCurrent(contexts[ordinal]));
  return contexts[ordinal];
}

const Kernels& kernels() {
  static const Kernels k = [] {
    use_device(0);
    Kernels k;
    CU_OK(cuModuleLoadData(&k.module, embedded::probe_kernels::fatbin.data));
    namespace names = embedded::probe_kernels::kernel;
    CU_OK(cuModuleGetFunction(&k.fill, k.module, names::probe_fill));
    CU_OK(cuModuleGetFunction(&k.add, k.module, names::probe_add));
    CU_OK(cuModuleGetFunction(&k.copy, k.module, names::probe_copy));
    CU_OK(cuModuleGetFunction(&k.c_copy, k.module, names::probe_c_copy));
    CU_OK(cuModuleGetFunction(&k.with_struct, k.module, names::probe_struct));
    CU_OK(cuModuleGetFunction(&k.nop, k.module, names::probe_nop));
    return k;
  }();
  return k;
}

// ---- Child --------------------------------------------------------------------------------

namespace {

std::string self_exe() {
  char path[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  REQUIRE(n > 0);
  path[n] = 0;
  return path;
}

bool inherited_name_dropped(const std::string& entry) {
  for (const char* prefix : {"LD_PRELOAD=", "LD_LIBRARY_PATH=", "GCR_", "SIMGPU_"})
    if (entry.rfind(prefix, 0) == 0) return true;
  return false;
}

}  // namespace

Child Child::mode(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  std::vector<std::string> argv = {self_exe(), "--child"};
  argv.insert(argv.end(), args.begin(), args.end());
  return start(argv, env, false);
}

Child Child::program(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  return start(argv, env, true);
}

Child Child::start(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                   bool search_path) {
  int in[2], out[2];
  REQUIRE(pipe2(in, O_CLOEXEC) == 0);
  REQUIRE(pipe2(out, O_CLOEXEC) == 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);  // the test ignores SIGPIPE; children get the default back
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);

  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e)
    if (!inherited_name_dropped(*e)) env_strings.emplace_back(*e);
  env_strings.insert(env_strings.end(), env.begin(), env.end());
  std::vector<char*> envp, args;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = gcr::test::emulated_argv(argv);
  for (auto& a : argv_copy) args.push_back(a.data());
  args.push_back(nullptr);

  gcr::test::ExecFence fence;  // under qemu-user: wait for the exec
  pid_t pid = -1;
  int rc = search_path
               ? posix_spawnp(&pid, argv_copy[0].c_str(), &actions, &attr, args.data(), envp.data())
               : posix_spawn(&pid, argv_copy[0].c_str(), &actions, &attr, args.data(), envp.data());
  if (rc == 0) fence.wait();
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(in[0]);
  close(out[1]);
  if (rc != 0) {
    close(in[1]);
    close(out[0]);
  }
  INFO("posix_spawn " << argv[0] << ": " << std::strerror(rc));
  REQUIRE(rc == 0);
  Child c;
  c.pid_ = pid;
  c.to_ = in[1];
  c.from_ = out[0];
  return c;
}

Child::Child(Child&& o) noexcept
    : pid_(o.pid_), to_(o.to_), from_(o.from_), buffer_(std::move(o.buffer_)), reaped_(o.reaped_) {
  o.pid_ = -1;
  o.to_ = o.from_ = -1;
}

Child::~Child() {
  if (to_ >= 0) close(to_);
  if (from_ >= 0) close(from_);
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

void Child::send(const std::string& line) {
  std::string s = line + "\n";
  REQUIRE(write(to_, s.data(), s.size()) == static_cast<ssize_t>(s.size()));
}

std::optional<std::string> Child::read_line(int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (auto nl = buffer_.find('\n'); nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd p{from_, POLLIN, 0};
    int n = poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    char buf[4096];
    ssize_t got = read(from_, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return std::nullopt;  // EOF
    buffer_.append(buf, static_cast<std::size_t>(got));
  }
}

std::optional<std::string> Child::read_until(const std::string& prefix, int timeout_ms,
                                             std::vector<std::string>* skipped) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    auto line = read_line(static_cast<int>(std::max<long long>(left.count(), 0)));
    if (!line) return std::nullopt;
    if (line->rfind(prefix, 0) == 0) return line;
    if (skipped) skipped->push_back(*line);
  }
}

std::vector<std::string> Child::read_all(int timeout_ms) {
  std::vector<std::string> lines;
  while (auto line = read_line(timeout_ms)) lines.push_back(*line);
  return lines;
}

int Child::wait(int timeout_ms) {
  int status = 0;
  if (reaped_) return status;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) break;
    if (r < 0 && errno != EINTR) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  reaped_ = true;
  return status;
}

void Child::kill(int sig) {
  ::kill(pid_, sig);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// ---- text ---------------------------------------------------------------------------------

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < line.size()) {
    std::size_t end = line.find(' ', pos);
    if (end == std::string::npos) end = line.size();
    if (end > pos) out.push_back(line.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

std::optional<PrintedPtr> parse_ptr(const std::string& line) {
  auto w = words(line);
  if (w.size() < 4 || w[0] != "ptr") return std::nullopt;
  PrintedPtr p;
  p.label = w[1];
  p.address = std::strtoull(w[2].c_str(), nullptr, 16);
  p.bytes = std::strtoull(w[3].c_str(), nullptr, 10);
  p.extra.assign(w.begin() + 4, w.end());
  return p;
}

std::string hex(std::uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// ---- control and /proc --------------------------------------------------------------------

control::Client connect(pid_t pid) {
  auto client = control::Client::connect(pid, std::chrono::seconds(10));
  if (!client) FAIL("connecting to process " << pid << ": " << client.error().message);
  return std::move(*client);
}

const control::RegionRecord* region_holding(const std::vector<control::RegionRecord>& regions,
                                            std::uint64_t address, std::uint64_t bytes) {
  for (const auto& r : regions)
    if (address >= r.address && address + bytes <= r.address + r.size) return &r;
  return nullptr;
}

std::vector<std::string> fd_names(pid_t pid) {
  std::vector<std::string> out;
  DIR* d = opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (!d) return out;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') out.emplace_back(e->d_name);
  closedir(d);
  return out;
}

std::vector<std::string> fd_targets(pid_t pid) {
  std::vector<std::string> out;
  std::string dir = "/proc/" + std::to_string(pid) + "/fd/";
  for (const std::string& name : fd_names(pid)) {
    char target[PATH_MAX];
    ssize_t n = readlink((dir + name).c_str(), target, sizeof target - 1);
    if (n > 0) out.emplace_back(target, static_cast<std::size_t>(n));
  }
  return out;
}

std::vector<std::string> maps_lines(pid_t pid, const std::string& needle) {
  std::vector<std::string> out;
  std::ifstream in("/proc/" + std::to_string(pid) + "/maps");
  for (std::string line; std::getline(in, line);)
    if (line.find(needle) != std::string::npos) out.push_back(line);
  return out;
}

}  // namespace ipt
