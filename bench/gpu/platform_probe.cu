// bench/gpu/platform_probe.cu: the platform's figures, once, driver API only (no kernels), so that
// the kit's other numbers can be read against them. Prints "@kit key=value" lines for
// bench/gpu/summarize.py and a human line for each.
//
//   nvcc -O2 -o platform_probe bench/gpu/platform_probe.cu -lcuda   (on the GPU machine)
//   g++ -O2 -x c++ -I/usr/local/cuda/include bench/gpu/platform_probe.cu -lcuda   (anywhere;
//   simgpu)
//
// Figures: cuInit and primary-context times; host-to-device and device-to-host bandwidth from
// pinned (cuMemHostAlloc) and pageable (malloc) memory; device-to-device copy bandwidth. Each
// bandwidth is the best of --reps copies of --size bytes (default 1 GiB; D2D copies the same size).
// Pinned memory (Note [Pinned host memory is gcr's] in interpose/host_alloc.cpp): what the driver's
// own cuMemHostAlloc mapping is (/proc/self/maps) and whether userfaultfd can write-protect it, and
// how long cuMemHostAlloc, cuMemHostRegister and cuMemHostUnregister of --size bytes take (gcr
// registers its own pinned memory, and unregisters and registers it again around each park).
#include <cuda.h>

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* name = "?";
  cuGetErrorName(r, &name);
  std::fprintf(stderr, "platform_probe: %s: %s\n", what, name);
  std::exit(1);
}
#define CK(x) check((x), #x)

size_t parse_size(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (end && *end ? *end : ' ') {
    case 'G':
    case 'g':
      v *= 1 << 30;
      break;
    case 'M':
    case 'm':
      v *= 1 << 20;
      break;
    case 'K':
    case 'k':
      v *= 1 << 10;
      break;
  }
  return static_cast<size_t>(v);
}

template <class F>
double best_gbps(size_t bytes, int reps, F copy) {
  double best_ms = 1e300;
  copy();  // warm-up
  for (int i = 0; i < reps; ++i) {
    auto t = Clock::now();
    copy();
    double ms = ms_since(t);
    if (ms < best_ms) best_ms = ms;
  }
  return static_cast<double>(bytes) / (best_ms * 1e-3) / 1e9;
}
// The /proc/self/maps line of the mapping holding p, without its address columns.
std::string mapping_of(const void* p) {
  std::FILE* f = std::fopen("/proc/self/maps", "r");
  if (!f) return "?";
  char line[512];
  std::string out = "none";
  auto a = reinterpret_cast<unsigned long long>(p);
  while (std::fgets(line, sizeof line, f)) {
    unsigned long long lo = 0, hi = 0;
    char perms[8] = {};
    int path_at = 0;
    if (std::sscanf(line, "%llx-%llx %7s %*s %*s %*s %n", &lo, &hi, perms, &path_at) < 3) continue;
    if (a < lo || a >= hi) continue;
    std::string path = path_at ? line + path_at : "";
    while (!path.empty() && (path.back() == '\n' || path.back() == ' ')) path.pop_back();
    out = std::string(perms) + ":" + (path.empty() ? "anonymous" : path);
    for (char& c : out)
      if (c == ' ') c = '_';
  }
  std::fclose(f);
  return out;
}

std::string errno_word() {
  return "errno" + std::to_string(errno);
}

// Whether a userfaultfd can register [p, p + bytes) for write protection: "ok" or the errno.
std::string uffd_wp(void* p, size_t bytes) {
  int fd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC));
  if (fd < 0) return std::string("no-userfaultfd:") + errno_word();
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = UFFD_FEATURE_PAGEFAULT_FLAG_WP;
  std::string out = "ok";
  uffdio_register reg{};
  reg.range.start = reinterpret_cast<unsigned long long>(p);
  reg.range.len = bytes;
  reg.mode = UFFDIO_REGISTER_MODE_WP;
  if (ioctl(fd, UFFDIO_API, &api) != 0)
    out = std::string("api:") + errno_word();
  else if (ioctl(fd, UFFDIO_REGISTER, &reg) != 0)
    out = std::string("register:") + errno_word();
  close(fd);
  return out;
}

void pinned_facts(size_t size) {
  void* p = nullptr;
  auto t = Clock::now();
  CK(cuMemHostAlloc(&p, size, 0));
  double alloc_ms = ms_since(t);
  std::string mapping = mapping_of(p), wp = uffd_wp(p, size);
  CK(cuMemFreeHost(p));
  void* anon = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (anon == MAP_FAILED) return;
  std::memset(anon, 3, size);
  t = Clock::now();
  CK(cuMemHostRegister(anon, size, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
  double register_ms = ms_since(t);
  t = Clock::now();
  CK(cuMemHostUnregister(anon));
  double unregister_ms = ms_since(t);
  t = Clock::now();
  CK(cuMemHostRegister(anon, size, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
  double reregister_ms = ms_since(t);
  std::string registered_wp = uffd_wp(anon, size);
  CK(cuMemHostUnregister(anon));
  munmap(anon, size);
  std::printf(
      "@kit pinned_bytes=%zu host_alloc_ms=%.1f host_alloc_mapping=%s host_alloc_uffd_wp=%s "
      "host_register_ms=%.1f host_unregister_ms=%.1f host_reregister_ms=%.1f "
      "registered_uffd_wp=%s\n",
      size, alloc_ms, mapping.c_str(), wp.c_str(), register_ms, unregister_ms, reregister_ms,
      registered_wp.c_str());
  std::printf(
      "pinned %zu MiB: cuMemHostAlloc %.1f ms (mapping %s, userfaultfd write protection %s); "
      "anonymous memory registered %.1f ms, unregistered %.1f ms, registered again %.1f ms "
      "(userfaultfd write protection %s)\n",
      size >> 20, alloc_ms, mapping.c_str(), wp.c_str(), register_ms, unregister_ms, reregister_ms,
      registered_wp.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  size_t size = size_t(1) << 30;
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--size") && i + 1 < argc)
      size = parse_size(argv[++i]);
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: platform_probe [--size BYTES] [--reps N]\n");
      return 2;
    }
  }
  auto t0 = Clock::now();
  CK(cuInit(0));
  double init_ms = ms_since(t0);
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  char name[256] = {};
  CK(cuDeviceGetName(name, sizeof name, dev));
  int drv = 0;
  CK(cuDriverGetVersion(&drv));
  size_t total = 0;
  CK(cuDeviceTotalMem(&total, dev));
  auto t1 = Clock::now();
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CK(cuCtxSynchronize());
  double ctx_ms = ms_since(t1);
  for (char* p = name; *p; ++p)
    if (*p == ' ') *p = '_';
  std::printf("@kit device=%s driver_version=%d device_mem_gib=%.1f\n", name, drv,
              total / double(1 << 30));
  std::printf("@kit cuinit_ms=%.1f primary_ctx_ms=%.1f\n", init_ms, ctx_ms);

  CUdeviceptr d1, d2;
  CK(cuMemAlloc(&d1, size));
  CK(cuMemAlloc(&d2, size));
  void* pinned = nullptr;
  CK(cuMemHostAlloc(&pinned, size, 0));
  void* pageable = std::malloc(size);
  if (!pageable) return 1;
  std::memset(pinned, 1, size);
  std::memset(pageable, 2, size);

  double h2d_pinned = best_gbps(size, reps, [&] { CK(cuMemcpyHtoD(d1, pinned, size)); });
  double d2h_pinned = best_gbps(size, reps, [&] { CK(cuMemcpyDtoH(pinned, d1, size)); });
  double h2d_pageable = best_gbps(size, reps, [&] { CK(cuMemcpyHtoD(d1, pageable, size)); });
  double d2h_pageable = best_gbps(size, reps, [&] { CK(cuMemcpyDtoH(pageable, d1, size)); });
  double d2d = best_gbps(size, reps, [&] {
    CK(cuMemcpyDtoD(d2, d1, size));
    CK(cuCtxSynchronize());
  });
  std::printf(
      "@kit copy_bytes=%zu h2d_pinned_gbps=%.2f d2h_pinned_gbps=%.2f h2d_pageable_gbps=%.2f "
      "d2h_pageable_gbps=%.2f d2d_gbps=%.2f\n",
      size, h2d_pinned, d2h_pinned, h2d_pageable, d2h_pageable, d2d);
  std::printf(
      "%s, driver %d: cuInit %.1f ms, primary context %.1f ms; GB/s H2D pinned %.2f pageable %.2f, "
      "D2H pinned %.2f pageable %.2f, D2D %.2f\n",
      name, drv, init_ms, ctx_ms, h2d_pinned, h2d_pageable, d2h_pinned, d2h_pageable, d2d);
  std::free(pageable);
  CK(cuMemFreeHost(pinned));
  pinned_facts(size);
  CK(cuMemFree(d1));
  CK(cuMemFree(d2));
  CK(cuDevicePrimaryCtxRelease(dev));
  return 0;
}
