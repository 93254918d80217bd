#include "common.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "emulator.h"
#include "fidelity_kernels_fatbin.h"

extern char** environ;

namespace fid {

std::string cu(CUresult r) {
  const char* name = nullptr;
  if (cuGetErrorName(r, &name) == CUDA_SUCCESS && name) return name;
  return "CUresult(" + std::to_string(static_cast<int>(r)) + ")";
}

CUcontext primary_context(int ordinal) {
  static CUcontext contexts[kDevices] = {};
  static std::mutex mu;
  std::lock_guard lock(mu);
  if (!contexts[ordinal]) {
    CU_OK(cuInit(0));
    CUdevice dev;
    CU_OK(cuDeviceGet(&dev, ordinal));
    CU_OK(cuDevicePrimaryCtxRetain(&contexts[ordinal], dev));
  }
  return contexts[ordinal];
}

void use_device0() {
  CU_OK(cuCtxSetCurrent(primary_context(0)));
}

const Kernels& kernels() {
  static const Kernels k = [] {
    use_device0();
    Kernels k;
    CU_OK(cuModuleLoadData(&k.module, embedded::fidelity_kernels::fatbin.data));
    namespace names = embedded::fidelity_kernels::kernel;
    CU_OK(cuModuleGetFunction(&k.affine, k.module, names::fid_affine));
    CU_OK(cuModuleGetFunction(&k.slow_fill, k.module, names::fid_slow_fill));
    CU_OK(cuModuleGetFunction(&k.with_struct, k.module, names::fid_struct));
    CU_OK(cuModuleGetFunction(&k.iota, k.module, names::fid_iota));
    CU_OK(cuModuleGetFunction(&k.publish, k.module, names::fid_publish));
    CU_OK(cuModuleGetFunction(&k.wait_copy, k.module, names::fid_wait_copy));
    CU_OK(cuModuleGetFunction(&k.follow, k.module, names::fid_follow));
    return k;
  }();
  return k;
}

std::uint32_t affine_sequence(std::uint32_t x, std::uint32_t k0, int n) {
  for (int i = 0; i < n; ++i) x = x * 3u + (k0 + static_cast<std::uint32_t>(i));
  return x;
}

DeviceBuffer::DeviceBuffer(std::size_t bytes) : size_(bytes) {
  CU_OK(cuMemAlloc(&ptr_, bytes));
}
DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cuMemFree(ptr_);
}

std::vector<std::uint32_t> read_u32(CUdeviceptr d, std::size_t n) {
  std::vector<std::uint32_t> v(n);
  CU_OK(cuMemcpyDtoH(v.data(), d, n * 4));
  return v;
}

void write_u32(CUdeviceptr d, const std::vector<std::uint32_t>& values) {
  CU_OK(cuMemcpyHtoD(d, values.data(), values.size() * 4));
}

std::uint32_t pattern(std::uint32_t seed, std::size_t i) {
  std::uint32_t x = seed * 0x9e3779b9u + static_cast<std::uint32_t>(i) * 2654435761u;
  return x ^ (x >> 15) ^ 0xa5a5a5a5u;
}

std::vector<std::uint32_t> pattern_words(std::uint32_t seed, std::size_t n) {
  std::vector<std::uint32_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = pattern(seed, i);
  return v;
}

// ---- StreamLatch --------------------------------------------------------------------------
struct StreamLatch::State {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  bool reached = false;
  static void CUDA_CB wait(void* self) {
    auto* s = static_cast<State*>(self);
    std::unique_lock lock(s->mu);
    s->reached = true;
    s->cv.notify_all();
    s->cv.wait(lock, [&] { return s->open; });
  }
};

StreamLatch::StreamLatch() : state_(new State) {}
StreamLatch::~StreamLatch() {
  open();
}  // state_ is leaked on purpose (see the header)
CUresult StreamLatch::hold(CUstream stream) {
  return cuLaunchHostFunc(stream, &State::wait, state_);
}
void StreamLatch::open() {
  std::lock_guard lock(state_->mu);
  state_->open = true;
  state_->cv.notify_all();
}
bool StreamLatch::reached() const {
  std::lock_guard lock(state_->mu);
  return state_->reached;
}

// ---- Background ---------------------------------------------------------------------------
struct Background::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};

Background::Background(std::function<void()> fn) : state_(std::make_shared<State>()) {
  thread_ = std::thread([s = state_, fn = std::move(fn)] {
    fn();
    std::lock_guard lock(s->mu);
    s->done = true;
    s->cv.notify_all();
  });
}
Background::~Background() {
  thread_.join();
}
bool Background::done() const {
  std::lock_guard lock(state_->mu);
  return state_->done;
}
bool Background::wait_for(int timeout_ms) {
  std::unique_lock lock(state_->mu);
  return state_->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                             [&] { return state_->done; });
}

// ---- Child --------------------------------------------------------------------------------
namespace {
std::string self_exe() {
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  REQUIRE(n > 0);
  path[n] = 0;
  return path;
}
}  // namespace

Child Child::mode(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  std::string exe = self_exe();
  std::vector<std::string> argv = {exe, "--child"};
  argv.insert(argv.end(), args.begin(), args.end());
  return start(exe, argv, env, false);
}

Child Child::program(const std::vector<std::string>& argv) {
  return start(argv.at(0), argv, {}, true);
}

Child Child::start(const std::string& path, const std::vector<std::string>& argv,
                   const std::vector<std::string>& extra_env, bool search_path) {
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
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    bool overridden = false;
    for (const std::string& x : extra_env)
      if (entry.compare(0, x.find('=') + 1, x, 0, x.find('=') + 1) == 0) overridden = true;
    if (!overridden) env_strings.push_back(entry);
  }
  env_strings.insert(env_strings.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> envp, args;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = gcr::test::emulated_argv(argv);
  const std::string& run = argv_copy.size() > argv.size() ? argv_copy[0] : path;
  for (auto& a : argv_copy) args.push_back(a.data());
  args.push_back(nullptr);

  gcr::test::ExecFence fence;  // under qemu-user: wait for the exec
  pid_t pid = -1;
  int rc = search_path ? posix_spawnp(&pid, run.c_str(), &actions, &attr, args.data(), envp.data())
                       : posix_spawn(&pid, run.c_str(), &actions, &attr, args.data(), envp.data());
  if (rc == 0) fence.wait();
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(in[0]);
  close(out[1]);
  INFO("posix_spawn " << path << ": " << std::strerror(rc));
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

std::vector<std::string> Child::read_all(int timeout_ms) {
  std::vector<std::string> lines;
  while (auto line = read_line(timeout_ms)) lines.push_back(*line);
  return lines;
}

int Child::wait() {
  int status = 0;
  if (!reaped_) {
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
  }
  return status;
}

void Child::kill(int sig) {
  ::kill(pid_, sig);
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

std::string value_of(const std::vector<std::string>& lines, const std::string& key) {
  for (const std::string& l : lines)
    if (l.size() > key.size() && l.compare(0, key.size(), key) == 0 && l[key.size()] == ' ')
      return l.substr(key.size() + 1);
  return {};
}

std::string hex(const void* data, std::size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  auto* b = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    out += digits[b[i] >> 4];
    out += digits[b[i] & 15];
  }
  return out;
}

std::string uuid_hex(const CUuuid& u) {
  return hex(u.bytes, sizeof u.bytes);
}

bool unhex(const std::string& text, void* out, std::size_t n) {
  if (text.size() != 2 * n) return false;
  auto* b = static_cast<unsigned char*>(out);
  for (std::size_t i = 0; i < n; ++i) {
    unsigned v = 0;
    if (std::sscanf(text.c_str() + 2 * i, "%2x", &v) != 1) return false;
    b[i] = static_cast<unsigned char>(v);
  }
  return true;
}

}  // namespace fid
