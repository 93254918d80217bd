// dlopen("libcuda.so"): glibc hands an already-loaded object to dlopen("libcuda.so.1") by its
// SONAME, which is how the interposer reaches cudart, cuBLAS and the rest; but the development
// name "libcuda.so", or a path to the real driver, would load the real driver beside it. Such
// names are rewritten to the interposer's own path. dlopen itself (dlopen_stub.S) tail-jumps to
// libc's, so that libc still sees the program's call site: dlopen resolves relative names with
// the *caller's* RUNPATH, which a call from here would lose.
#include <dlfcn.h>

#include <cstring>
#include <string>

namespace gcr::interpose {

void* libc_dlopen(const char* path, int flags) {
  using DlopenFn = void* (*)(const char*, int);
  static const DlopenFn next = reinterpret_cast<DlopenFn>(dlsym(RTLD_NEXT, "dlopen"));
  return next ? next(path, flags) : nullptr;
}

namespace {

std::string own_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&libc_dlopen), &info) && info.dli_fname) return info.dli_fname;
  return {};
}

bool is_driver_name(const char* path) {
  const char* base = std::strrchr(path, '/');
  base = base ? base + 1 : path;
  return std::strcmp(base, "libcuda.so") == 0 || std::strcmp(base, "libcuda.so.1") == 0;
}

}  // namespace
}  // namespace gcr::interpose

// Called by the dlopen stub: the name to pass on to libc's dlopen.
extern "C" __attribute__((visibility("hidden"))) const char* gcr_dlopen_name(const char* path) {
  using namespace gcr::interpose;
  if (!path || !is_driver_name(path)) return path;
  static const std::string self = own_path();
  return self.empty() ? path : self.c_str();
}

// libc's dlopen, for the stub's tail jump.
extern "C" __attribute__((visibility("hidden"))) void* gcr_libc_dlopen_address() {
  static void* next = dlsym(RTLD_NEXT, "dlopen");
  return next;
}
