// What the interposer tests share: the paths of the interposer, simgpu and mlp_train; the
// environments a child runs in (under gcr, or directly on simgpu); child processes with piped
// stdin/stdout (this program in a child mode, child_modes.cpp, or any program); a control session
// with a process; and the probe kernels.
//
// ctest runs this program itself under gcr (LD_PRELOAD=the interposer, GCR_REAL_LIBCUDA=simgpu,
// two 2 GiB simulated devices): the in-process tests (cuGetProcAddress, write tracking, dlopen,
// managed memory) check the process they run in; the others start children in an environment
// they choose, and talk to them through gcr's control channel (gcr/control.h).
#pragma once

#include <cuda.h>
#include <signal.h>
#include <sys/types.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gcr/control.h"
#include "kernels/probe_types.h"

namespace ipt {

namespace control = gcr::control;

// Absolute paths, from the build (CMakeLists.txt).
std::string interposer_path();
std::string simgpu_path();
std::string mlp_train_path();

// The environment of a child run under gcr: LD_PRELOAD, GCR_REAL_LIBCUDA, two simulated devices
// of 2 GiB, and `extra` (NAME=value) on top.
std::vector<std::string> gcr_env(const std::vector<std::string>& extra = {});
// The environment of a child run directly on simgpu (LD_LIBRARY_PATH), without gcr.
std::vector<std::string> plain_env(const std::vector<std::string>& extra = {});

// The name of a CUresult, so that a failed check prints it: CHECK(cu(r) == "CUDA_SUCCESS").
std::string cu(CUresult r);
#define CU_OK(call) REQUIRE(::ipt::cu(call) == "CUDA_SUCCESS")

// True when this process runs under the interposer (its cuInit is the interposer's).
bool under_gcr();
// For in-process tests: fails the test with what to do when this process is not under gcr.
void require_under_gcr();

// cuInit once; device `ordinal`'s primary context made current on the calling thread.
CUcontext use_device(int ordinal = 0);

// The probe kernels (kernels/probe_kernels.cu), loaded once into device 0's primary context.
struct Kernels {
  CUmodule module = nullptr;
  CUfunction fill = nullptr, add = nullptr, copy = nullptr, c_copy = nullptr, with_struct = nullptr,
             nop = nullptr;
};
const Kernels& kernels();

// cuLaunchKernel on a 1-D grid covering n threads, the arguments by value (exact types).
template <typename... Args>
CUresult launch(CUfunction f, int n, CUstream stream, Args... args) {
  void* params[] = {static_cast<void*>(&args)..., nullptr};
  unsigned block = 128, grid = static_cast<unsigned>((n + 127) / 128);
  return cuLaunchKernel(f, grid ? grid : 1, 1, 1, block, 1, 1, 0, stream, params, nullptr);
}

// A child process, its stdin and stdout piped to the test, its stderr the test's. Killed and
// reaped at the end of the scope if still running.
class Child {
 public:
  // This test program in a child mode: `<exe> --child <args...>`.
  static Child mode(const std::vector<std::string>& args, const std::vector<std::string>& env);
  // Any program (argv[0] searched on PATH). The environment is the test's own, less every
  // LD_PRELOAD, LD_LIBRARY_PATH, GCR_* and SIMGPU_* entry, plus `env`.
  static Child program(const std::vector<std::string>& argv, const std::vector<std::string>& env);

  Child(Child&& other) noexcept;
  Child& operator=(Child&&) = delete;
  ~Child();

  pid_t pid() const { return pid_; }
  void send(const std::string& line);
  // The next line (without the newline), or nullopt at EOF or after timeout_ms.
  std::optional<std::string> read_line(int timeout_ms = 20000);
  // Lines until one starting with `prefix`, which is returned (the others are appended to
  // `skipped` when given); nullopt at EOF or timeout.
  std::optional<std::string> read_until(const std::string& prefix, int timeout_ms = 20000,
                                        std::vector<std::string>* skipped = nullptr);
  // Every line until the child closes its stdout (or timeout_ms passes).
  std::vector<std::string> read_all(int timeout_ms = 60000);
  // Reaps; the wait status. Kills with SIGKILL first if it has not exited after timeout_ms.
  int wait(int timeout_ms = 60000);
  void kill(int sig = SIGKILL);

 private:
  Child() = default;
  static Child start(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                     bool search_path);
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  std::string buffer_;
  bool reaped_ = false;
};

// "exit 0", "exit 3", "signal 9": a wait status, readably.
std::string describe_status(int status);

// The words of a line, split at spaces.
std::vector<std::string> words(const std::string& line);

// A device pointer a child printed: "ptr <label> 0x<address> <bytes> [<extra>...]".
struct PrintedPtr {
  std::string label;
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  std::vector<std::string> extra;
};
std::optional<PrintedPtr> parse_ptr(const std::string& line);
std::string hex(std::uint64_t v);

// A control session with pid (control::Client::connect), failing the test with the error.
control::Client connect(pid_t pid);
// The region holding [address, address + bytes), or null.
const control::RegionRecord* region_holding(const std::vector<control::RegionRecord>& regions,
                                            std::uint64_t address, std::uint64_t bytes = 1);

// The targets of /proc/<pid>/fd's links ("memfd:gcr-control (deleted)", "pipe:[123]", ...).
std::vector<std::string> fd_targets(pid_t pid);
// The names of /proc/<pid>/fd's entries ("0", "1", ...).
std::vector<std::string> fd_names(pid_t pid);
// The lines of /proc/<pid>/maps that contain `needle`.
std::vector<std::string> maps_lines(pid_t pid, const std::string& needle);

// Entry point of the child modes (child_modes.cpp): argv[0] is the mode.
int run_child_mode(int argc, char** argv);

}  // namespace ipt
