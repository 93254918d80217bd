// workload_util.h: what every workload program shares. Host code only (not for kernel files).
//
// CU_CHECK(call): on failure print the call, file:line and the error's name and description, then
// exit 2. Exit codes across workloads: 0 ok, 1 wrong result, 2 CUDA or usage error.
#pragma once

#include <cuda.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#define CU_CHECK(call)                                              \
  do {                                                              \
    CUresult cu_check_result_ = (call);                             \
    if (cu_check_result_ != CUDA_SUCCESS)                           \
      ::wl::cuda_fail(cu_check_result_, #call, __FILE__, __LINE__); \
  } while (0)

namespace wl {

// For when cuGetErrorName cannot answer (the toolkit's stub library, a broken driver).
inline const char* builtin_error_name(CUresult r) {
  switch (r) {
#define WL_ERROR_CASE(e) \
  case e:                \
    return #e;
    WL_ERROR_CASE(CUDA_ERROR_INVALID_VALUE)
    WL_ERROR_CASE(CUDA_ERROR_OUT_OF_MEMORY)
    WL_ERROR_CASE(CUDA_ERROR_NOT_INITIALIZED)
    WL_ERROR_CASE(CUDA_ERROR_DEINITIALIZED)
    WL_ERROR_CASE(CUDA_ERROR_STUB_LIBRARY)
    WL_ERROR_CASE(CUDA_ERROR_NO_DEVICE)
    WL_ERROR_CASE(CUDA_ERROR_INVALID_DEVICE)
    WL_ERROR_CASE(CUDA_ERROR_INVALID_IMAGE)
    WL_ERROR_CASE(CUDA_ERROR_INVALID_CONTEXT)
    WL_ERROR_CASE(CUDA_ERROR_NO_BINARY_FOR_GPU)
    WL_ERROR_CASE(CUDA_ERROR_INVALID_HANDLE)
    WL_ERROR_CASE(CUDA_ERROR_NOT_FOUND)
    WL_ERROR_CASE(CUDA_ERROR_ILLEGAL_ADDRESS)
    WL_ERROR_CASE(CUDA_ERROR_LAUNCH_FAILED)
    WL_ERROR_CASE(CUDA_ERROR_NOT_SUPPORTED)
    WL_ERROR_CASE(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH)
    WL_ERROR_CASE(CUDA_ERROR_UNKNOWN)
#undef WL_ERROR_CASE
    default:
      return "unknown CUresult";
  }
}

[[noreturn]] inline void cuda_fail(CUresult r, const char* call, const char* file, int line) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName(r, &name) != CUDA_SUCCESS || !name) name = builtin_error_name(r);
  if (cuGetErrorString(r, &text) != CUDA_SUCCESS || !text) text = "no description";
  std::fflush(stdout);
  std::fprintf(stderr, "CUDA error: %s failed at %s:%d: %s (%d): %s\n", call, file, line, name,
               static_cast<int>(r), text);
  if (r == CUDA_ERROR_STUB_LIBRARY) {
    std::fprintf(stderr,
                 "(this is the toolkit's stub libcuda: point LD_LIBRARY_PATH at simgpu "
                 "or at the real driver)\n");
  }
  std::exit(2);
}

// cuInit, then device `ordinal`'s primary context retained and made current: how every workload
// starts. The context stays retained (a workload that releases it does so itself).
struct PrimaryContext {
  explicit PrimaryContext(int ordinal = 0) {
    CU_CHECK(cuInit(0));
    CU_CHECK(cuDeviceGet(&device, ordinal));
    CU_CHECK(cuDevicePrimaryCtxRetain(&context, device));
    CU_CHECK(cuCtxSetCurrent(context));
  }
  CUdevice device = 0;
  CUcontext context = nullptr;
};

// A fatbin compiled into the program by gcr_add_workload (see <stem>_fatbin.h).
struct EmbeddedFatbin {
  const char* name;
  const unsigned char* data;
  std::size_t size;
};

inline CUmodule load_module(const EmbeddedFatbin& fatbin) {
  CUmodule module = nullptr;
  CUresult r = cuModuleLoadData(&module, fatbin.data);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "loading embedded fatbin %s (%zu bytes):\n", fatbin.name, fatbin.size);
    cuda_fail(r, "cuModuleLoadData", __FILE__, __LINE__);
  }
  return module;
}

inline CUfunction get_function(CUmodule module, const char* symbol) {
  CUfunction f = nullptr;
  CUresult r = cuModuleGetFunction(&f, module, symbol);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "looking up kernel %s:\n", symbol);
    cuda_fail(r, "cuModuleGetFunction", __FILE__, __LINE__);
  }
  return f;
}

// A 1-D launch shape covering n threads.
struct Dims {
  unsigned grid;
  unsigned block;
};
inline Dims cover(std::uint64_t n, unsigned block = 128) {
  std::uint64_t grid = (n + block - 1) / block;
  if (grid == 0) grid = 1;
  if (grid > 0x7fffffffu) {
    std::fprintf(stderr, "launch of %llu threads is too large\n",
                 static_cast<unsigned long long>(n));
    std::exit(2);
  }
  return {static_cast<unsigned>(grid), block};
}

// cuLaunchKernel with the arguments passed by value; their types must match the kernel's
// parameters exactly (CUdeviceptr for pointers, int vs unsigned long long...). Use as
// CU_CHECK(wl::launch(...)) so that a failure names the call.
template <typename... Args>
CUresult launch(CUfunction f, Dims d, CUstream stream, Args... args) {
  void* params[] = {static_cast<void*>(&args)..., nullptr};
  return cuLaunchKernel(f, d.grid, 1, 1, d.block, 1, 1, 0, stream, params, nullptr);
}

// splitmix64: the fixed-seed generator behind every workload's data.
inline std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// Uniform in [-1, 1), from the top 24 bits (exact in a float).
inline float uniform_pm1(std::uint64_t& state) {
  return static_cast<float>(splitmix64(state) >> 40) * 0x1.0p-23f - 1.0f;
}

// FNV-1a, 64 bit, over raw bytes.
class Fnv1a {
 public:
  void add(const void* data, std::size_t n) {
    auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * 0x100000001b3ull;
  }
  std::uint64_t value() const { return h_; }

 private:
  std::uint64_t h_ = 0xcbf29ce484222325ull;
};

// Milliseconds since the program started (since the first call, made early in main).
inline double ms_since_start() {
  static const auto start = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// --delay-while FILE / --hold-while FILE (README.md): a test slows a run, or keeps it from ending,
// only while its file exists; an empty path is no file.
inline bool file_exists(const std::string& path) {
  return !path.empty() && ::access(path.c_str(), F_OK) == 0;
}
// The step delay: always without --delay-while, else only while its file exists.
inline void step_delay(int ms, const std::string& delay_while) {
  if (ms > 0 && (delay_while.empty() || file_exists(delay_while)))
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}
// Before the last step: waits (polling every 10 ms) while the --hold-while file exists.
inline void hold_while(const std::string& path) {
  while (file_exists(path)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

// Command-line flags: "--name value" or "--name=value"; booleans are "--name". Look every flag up,
// then call finish(), which rejects anything left over. Errors print the usage and exit 2.
class Flags {
 public:
  Flags(int argc, char** argv, std::string usage) : usage_(std::move(usage)) {
    for (int i = 1; i < argc; ++i) args_.emplace_back(argv[i]);
    used_.assign(args_.size(), false);
    for (const std::string& a : args_) {
      if (a == "--help" || a == "-h") {
        std::printf("%s\n", usage_.c_str());
        std::exit(0);
      }
    }
  }

  bool boolean(std::string_view name) {
    bool found = false;
    for (std::size_t i = 0; i < args_.size(); ++i) {
      if (args_[i] == name) used_[i] = found = true;
    }
    return found;
  }

  std::int64_t integer(std::string_view name, std::int64_t fallback, std::int64_t min,
                       std::int64_t max) {
    std::string v;
    if (!value(name, &v)) return fallback;
    char* end = nullptr;
    long long n = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < min || n > max) {
      error(std::string(name) + " wants an integer in [" + std::to_string(min) + ", " +
            std::to_string(max) + "], got '" + v + "'");
    }
    return n;
  }

  // A byte count with an optional binary suffix: 4096, 64K, 256M, 4G, 1T (also 4GiB, 4GB).
  std::uint64_t bytes(std::string_view name, std::uint64_t fallback) {
    std::string v;
    if (!value(name, &v)) return fallback;
    char* end = nullptr;
    unsigned long long n = std::strtoull(v.c_str(), &end, 10);
    std::string_view suffix(end);
    int shift = 0;
    if (!suffix.empty()) {
      std::size_t unit = std::string_view("kmgt").find(suffix[0] | 0x20);  // lower case
      if (unit != std::string_view::npos) shift = 10 * static_cast<int>(unit + 1);
    }
    if (shift > 0) suffix.remove_prefix(1);
    if (suffix == "B" || (shift > 0 && suffix == "iB")) suffix = {};
    if (v.empty() || end == v.c_str() || v[0] == '-' || !suffix.empty() || n > (~0ull >> shift)) {
      error(std::string(name) + " wants a byte count like 4096, 256M or 4G, got '" + v + "'");
    }
    return static_cast<std::uint64_t>(n) << shift;
  }

  std::string text(std::string_view name, std::string fallback) {
    std::string v;
    return value(name, &v) ? v : fallback;
  }

  void finish() {
    for (std::size_t i = 0; i < args_.size(); ++i) {
      if (!used_[i]) error("unknown argument '" + args_[i] + "'");
    }
  }

  [[noreturn]] void error(const std::string& message) {
    std::fprintf(stderr, "error: %s\n%s\n", message.c_str(), usage_.c_str());
    std::exit(2);
  }

 private:
  bool value(std::string_view name, std::string* out) {
    bool found = false;
    for (std::size_t i = 0; i < args_.size(); ++i) {
      std::string_view a = args_[i];
      if (a == name) {
        if (i + 1 >= args_.size()) error(std::string(name) + " needs a value");
        *out = args_[i + 1];
        used_[i] = used_[i + 1] = found = true;
        ++i;
      } else if (a.size() > name.size() && a.substr(0, name.size()) == name &&
                 a[name.size()] == '=') {
        *out = std::string(a.substr(name.size() + 1));
        used_[i] = found = true;
      }
    }
    return found;  // the last occurrence wins
  }

  std::string usage_;
  std::vector<std::string> args_;
  std::vector<bool> used_;
};

}  // namespace wl
