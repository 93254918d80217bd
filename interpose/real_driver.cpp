// Loading the real driver (Note in real_driver.h) and resolving the trampolines' slots.
#include "real_driver.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "config.h"
#include "gate.h"
#include "gcr/multiarch.h"

extern "C" void* gcr_slots[];  // trampolines.gen.S

namespace gcr::interpose {

// dlopen as libc defines it, bypassing the interposer's own dlopen (dlopen_hook.cpp).
void* libc_dlopen(const char* path, int flags);

namespace {

const char* const kSymbolNames[] = {
#define GCR_DRIVER_SYMBOL(name) #name,
#include "driver_symbols.gen.inc"
#undef GCR_DRIVER_SYMBOL
};
constexpr unsigned kSymbolCount = sizeof kSymbolNames / sizeof kSymbolNames[0];

RealDriver g_real;
std::string g_error;
std::once_flag g_once;
std::unordered_map<const void*, unsigned>* g_reverse = nullptr;  // immortal: used after exit

CUresult missing_symbol() {
  return CUDA_ERROR_NOT_SUPPORTED;
}

bool same_file(const char* a, const char* b) {
  struct stat sa, sb;
  return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

std::string own_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&real_driver), &info) && info.dli_fname) return info.dli_fname;
  return {};
}

void load() {
  std::string self = own_path();
  std::vector<std::string> candidates;
  if (!config().real_libcuda.empty()) {
    candidates.push_back(config().real_libcuda);
  } else {
    candidates = {GCR_MULTIARCH_LIBDIR "/libcuda.so.1",
                  "/usr/lib64/libcuda.so.1",
                  "/usr/lib/libcuda.so.1",
                  "/usr/local/nvidia/lib64/libcuda.so.1",
                  "/usr/lib/wsl/lib/libcuda.so.1",
                  "/usr/local/cuda/compat/libcuda.so.1"};
    // No NVIDIA driver: simgpu beside the interposer (an install's lib/gcr/simgpu, a build
    // tree's simgpu/), so that LD_PRELOAD=$(gcr preload-path) works on such a machine too.
    if (auto slash = self.rfind('/'); slash != std::string::npos) {
      std::string dir = self.substr(0, slash);
      candidates.push_back(dir + "/simgpu/libcuda.so.1");
      candidates.push_back(dir + "/../simgpu/libcuda.so.1");
    }
  }
  for (const std::string& path : candidates) {
    if (path.empty() || path[0] != '/') {
      g_error = "GCR_REAL_LIBCUDA must be an absolute path, not '" + path + "'";
      continue;
    }
    if (access(path.c_str(), R_OK) != 0) continue;
    if (!self.empty() && same_file(path.c_str(), self.c_str())) continue;  // never ourselves
    void* h = libc_dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
      const char* why = dlerror();
      g_error = "cannot load the CUDA driver " + path + ": " + (why ? why : "unknown error");
      continue;
    }
    g_real.handle = h;
    g_real.path = path;
    break;
  }
  if (!g_real.handle) {
    if (g_error.empty())
      g_error =
          "no CUDA driver found (looked in the standard locations); set GCR_REAL_LIBCUDA to "
          "the absolute path of the real libcuda.so.1";
    std::fprintf(stderr, "gcr: %s\n", g_error.c_str());
    return;
  }
#define GCR_REAL_RESOLVE(name) \
  g_real.name = reinterpret_cast<decltype(g_real.name)>(dlsym(g_real.handle, #name));
#define GCR_REAL_RESOLVE_T(name, declared) GCR_REAL_RESOLVE(name)
  GCR_WRAPPED_FUNCTIONS(GCR_REAL_RESOLVE, GCR_REAL_RESOLVE_T)
#undef GCR_REAL_RESOLVE
#undef GCR_REAL_RESOLVE_T
  auto* reverse = new std::unordered_map<const void*, unsigned>();
  for (unsigned i = 0; i < kSymbolCount; ++i) {
    void* p = dlsym(g_real.handle, kSymbolNames[i]);
    gcr_slots[i] = p ? p : reinterpret_cast<void*>(&missing_symbol);
    if (p) reverse->emplace(p, i);  // first name wins for aliases
  }
  g_reverse = reverse;
}

}  // namespace

const RealDriver* real_driver() {
  std::call_once(g_once, load);
  return g_real.handle ? &g_real : nullptr;
}

const std::string& driver_error() {
  return g_error;
}

void* real_symbol(unsigned index) {
  if (index >= kSymbolCount) return reinterpret_cast<void*>(&missing_symbol);
  real_driver();
  return gcr_slots[index] ? gcr_slots[index] : reinterpret_cast<void*>(&missing_symbol);
}

unsigned symbol_index(const char* name) {
  // kSymbolNames is sorted (driver_symbols.gen.inc is generated sorted).
  auto it = std::lower_bound(std::begin(kSymbolNames), std::end(kSymbolNames), name,
                             [](const char* a, const char* b) { return std::strcmp(a, b) < 0; });
  return it != std::end(kSymbolNames) && std::strcmp(*it, name) == 0
             ? static_cast<unsigned>(it - std::begin(kSymbolNames))
             : ~0u;
}

const char* symbol_name(unsigned index) {
  return index < kSymbolCount ? kSymbolNames[index] : nullptr;
}

const char* symbol_for_real_address(const void* address) {
  if (!real_driver() || !g_reverse) return nullptr;
  auto it = g_reverse->find(address);
  return it == g_reverse->end() ? nullptr : kSymbolNames[it->second];
}

}  // namespace gcr::interpose

// Called by gcr_trampoline_slow with the argument registers saved: waits while the gate is
// closed (quiesce), then returns the real entry point to tail-call.
extern "C" __attribute__((visibility("hidden"))) void* gcr_trampoline_target(unsigned index) {
  gcr::interpose::gate_wait_open();
  return gcr::interpose::real_symbol(index);
}
