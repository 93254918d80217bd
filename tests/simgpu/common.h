// What simgpu's fidelity tests share: CUresult names for readable checks, the device-0 context
// the in-process tests run in, the test kernels, a latch that holds a stream, and child
// processes of this test program (main.cpp runs `<exe> --child <mode> ...` as a child mode).
//
// The tests run against simgpu's libcuda.so.1 with SIMGPU_DEVICES=2 and SIMGPU_MEMORY=256M
// (CMakeLists.txt sets them); each ctest entry is one tag, so one process per test file.
#pragma once

#include <cuda.h>
#include <signal.h>
#include <sys/types.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kernels/fidelity_types.h"

namespace fid {

inline constexpr int kDevices = 2;
inline constexpr std::uint64_t kMemoryBytes = 256ull << 20;

// The name of a CUresult ("CUDA_SUCCESS", "CUDA_ERROR_NOT_FOUND"), so that checks read as
// REQUIRE(cu(cuMemAlloc(...)) == "CUDA_SUCCESS") and a failure prints both names.
std::string cu(CUresult r);
#define CU_OK(call) REQUIRE(::fid::cu(call) == "CUDA_SUCCESS")

// cuInit once; then device 0's primary context is made current on the calling thread.
void use_device0();
// Device `ordinal`'s primary context, retained once for the life of the process.
CUcontext primary_context(int ordinal);

// The kernels of kernels/fidelity_kernels.cu, loaded once into device 0's primary context.
struct Kernels {
  CUmodule module = nullptr;
  CUfunction affine = nullptr, slow_fill = nullptr, with_struct = nullptr, iota = nullptr;
  CUfunction publish = nullptr, wait_copy = nullptr, follow = nullptr;
};
const Kernels& kernels();

// cuLaunchKernel on a 1-D grid with the arguments by value (their types must match exactly).
template <typename... Args>
CUresult launch(CUfunction f, unsigned grid, unsigned block, CUstream stream, Args... args) {
  void* params[] = {static_cast<void*>(&args)..., nullptr};
  return cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, stream, params, nullptr);
}
// What n applications of fid_affine with k = k0, k0+1, ... make of x.
std::uint32_t affine_sequence(std::uint32_t x, std::uint32_t k0, int n);

// cuMemAlloc'd memory freed at the end of the scope.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  CUdeviceptr get() const { return ptr_; }
  std::size_t size() const { return size_; }

 private:
  CUdeviceptr ptr_ = 0;
  std::size_t size_ = 0;
};

std::vector<std::uint32_t> read_u32(CUdeviceptr d, std::size_t n);
void write_u32(CUdeviceptr d, const std::vector<std::uint32_t>& values);
// A recognisable pattern: word i of pattern `seed`.
std::uint32_t pattern(std::uint32_t seed, std::size_t i);
std::vector<std::uint32_t> pattern_words(std::uint32_t seed, std::size_t n);

// Holds a stream: hold(s) queues a host function that waits until open(). The state outlives
// the object (a held host function may still run after a failed test unwinds); the destructor
// opens the latch so that a failing test never leaves a stream stuck.
class StreamLatch {
 public:
  StreamLatch();
  ~StreamLatch();
  StreamLatch(const StreamLatch&) = delete;
  StreamLatch& operator=(const StreamLatch&) = delete;
  CUresult hold(CUstream stream);
  void open();
  bool reached() const;  // has the stream arrived at the latch?

 private:
  struct State;
  State* state_;
};

// Runs `fn` on another thread and says whether it has returned: for checks of the kind "a call
// blocked by X has not returned after N ms, and returns once X is released".
class Background {
 public:
  explicit Background(std::function<void()> fn);
  ~Background();  // joins
  bool done() const;
  // Waits up to timeout_ms for fn to return; true if it has.
  bool wait_for(int timeout_ms);

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::thread thread_;
};

// A child process with its stdin and stdout piped to the test. Killed and reaped at the end of
// the scope if still running.
class Child {
 public:
  // This test program in a child mode: `<exe> --child <args...>`. env: extra NAME=value entries.
  // Descriptors the caller made inheritable (CLOEXEC cleared) are inherited.
  static Child mode(const std::vector<std::string>& args, const std::vector<std::string>& env = {});
  // Any program, found on PATH.
  static Child program(const std::vector<std::string>& argv);

  Child(Child&& other) noexcept;
  Child& operator=(Child&&) = delete;
  ~Child();

  pid_t pid() const { return pid_; }
  void send(const std::string& line);
  // The next line the child writes (without the newline), or nullopt at EOF or after timeout_ms.
  std::optional<std::string> read_line(int timeout_ms = 10000);
  // Every line the child writes until it closes its stdout (or timeout_ms passes).
  std::vector<std::string> read_all(int timeout_ms = 10000);
  int wait();                    // reaps; returns the wait status
  void kill(int sig = SIGKILL);  // does not reap

 private:
  Child() = default;
  static Child start(const std::string& path, const std::vector<std::string>& argv,
                     const std::vector<std::string>& extra_env, bool search_path);
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  std::string buffer_;
  bool reaped_ = false;
};

// The words of a line, split at spaces.
std::vector<std::string> words(const std::string& line);
// The value of "key value" among lines; empty if absent.
std::string value_of(const std::vector<std::string>& lines, const std::string& key);

std::string hex(const void* data, std::size_t n);
// The bytes of a hex() string (as many as fit in n), for handles passed to a child; false if
// it is not exactly n bytes of hex.
bool unhex(const std::string& text, void* out, std::size_t n);
// What fid_publish writes: word i of seed.
inline std::uint32_t published(std::uint32_t seed, std::size_t i) {
  return seed * 2654435761u + static_cast<std::uint32_t>(i);
}
std::string uuid_hex(const CUuuid& u);

// Entry point of child modes (child_modes.cpp): argv[0] is the mode.
int run_child_mode(int argc, char** argv);

}  // namespace fid
