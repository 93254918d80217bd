// Child modes: this test program run as another process (`<exe> --child <mode> ...`), for what
// one process cannot check about itself: calls before cuInit, the environment read at cuInit, a
// fault that kills the process, sharing memory with another process, and the driver checkpoint
// API, which always targets another process.
//
// A child talks to its test over stdin/stdout, one line per message, "<key> <values...>". A failed
// CUDA call prints "error <call> <CUresult name>" and exits 3.
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "child_support.h"
#include "common.h"
#include "fidelity_kernels_fatbin.h"

namespace fid {
namespace {

// VMM memory on device 0: reserved, created, mapped and read-write.
CUdeviceptr vmm_alloc(std::size_t size, CUmemGenericAllocationHandle* handle) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CHILD_CHECK(cuMemCreate(handle, size, &prop, 0));
  CUdeviceptr d;
  CHILD_CHECK(cuMemAddressReserve(&d, size, 0, 0, 0));
  CHILD_CHECK(cuMemMap(d, size, 0, *handle, 0));
  CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CHILD_CHECK(cuMemSetAccess(d, size, &access, 1));
  return d;
}

// Calls made before cuInit, then cuInit.
int mode_uninit() {
  int version = 0;
  CUresult r = cuDriverGetVersion(&version);
  say("version " + cu(r) + " " + std::to_string(version));
  int count = -1;
  say("count " + cu(cuDeviceGetCount(&count)));
  CUdevice dev;
  say("device_get " + cu(cuDeviceGet(&dev, 0)));
  CUdeviceptr d;
  say("mem_alloc " + cu(cuMemAlloc(&d, 4096)));
  CUcontext ctx;
  say("ctx_get_current " + cu(cuCtxGetCurrent(&ctx)));
  say("init " + cu(cuInit(0)));
  count = -1;
  r = cuDeviceGetCount(&count);
  say("count_after " + cu(r) + " " + std::to_string(count));
  return 0;
}

// cuInit and every device's UUID (the test sets SIMGPU_UUIDS or SIMGPU_DEVICES).
int mode_uuids() {
  CUresult r = cuInit(0);
  say("init " + cu(r));
  if (r != CUDA_SUCCESS) return 0;
  int count = 0;
  CHILD_CHECK(cuDeviceGetCount(&count));
  say("count " + std::to_string(count));
  for (int i = 0; i < count; ++i) {
    CUuuid u;
    CHILD_CHECK(cuDeviceGetUuid(&u, i));
    say("uuid" + std::to_string(i) + " " + uuid_hex(u));
  }
  return 0;
}

// Reads device memory with a host load; on a GPU (and on simgpu) that faults.
int mode_deref(const std::string& kind) {
  rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  prctl(PR_SET_DUMPABLE, 0);  // no core dump, whatever core_pattern says
  init_device0();
  CUdeviceptr d;
  if (kind == "vmm") {
    CUmemGenericAllocationHandle h;
    d = vmm_alloc(2 << 20, &h);
  } else {
    CHILD_CHECK(cuMemAlloc(&d, 4096));
  }
  CHILD_CHECK(cuMemsetD32(d, 0x12345678u, 1));
  say("touching " + ptr_hex(d));
  volatile auto* p = reinterpret_cast<volatile std::uint32_t*>(d);
  std::uint32_t v = *p;
  say("survived " + std::to_string(v));
  return 0;
}

// Imports a VMM allocation exported by the test as a POSIX fd, checks its bytes, writes others.
int mode_vmm_import(int fd, std::size_t size, std::uint32_t seen_seed, std::uint32_t write_seed) {
  init_device0();
  CUmemGenericAllocationHandle h;
  CHILD_CHECK(
      cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)),
                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  close(fd);  // the driver keeps its own reference
  CUmemAllocationProp prop{};
  CHILD_CHECK(cuMemGetAllocationPropertiesFromHandle(&prop, h));
  say("device " + std::to_string(prop.location.id));
  CUdeviceptr d;
  CHILD_CHECK(cuMemAddressReserve(&d, size, 0, 0, 0));
  CHILD_CHECK(cuMemMap(d, size, 0, h, 0));
  CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CHILD_CHECK(cuMemSetAccess(d, size, &access, 1));
  std::vector<std::uint32_t> words(size / 4);
  CHILD_CHECK(cuMemcpyDtoH(words.data(), d, size));
  std::size_t bad = words.size();
  for (std::size_t i = 0; i < words.size() && bad == words.size(); ++i)
    if (words[i] != pattern(seen_seed, i)) bad = i;
  say(bad == words.size() ? "seen ok" : "seen mismatch-at " + std::to_string(bad));
  std::vector<std::uint32_t> mine = pattern_words(write_seed, size / 4);
  CHILD_CHECK(cuMemcpyHtoD(d, mine.data(), size));
  CHILD_CHECK(cuCtxSynchronize());
  say("written");
  std::string line;
  std::getline(std::cin, line);  // "exit" or EOF
  CHILD_CHECK(cuMemUnmap(d, size));
  CHILD_CHECK(cuMemAddressFree(d, size));
  CHILD_CHECK(cuMemRelease(h));
  return 0;
}

// The target of the driver checkpoint tests: a context on device 0 with heap and VMM memory
// holding patterns, a stream and a module; then serves the test's commands:
//   probe   one CUDA call (a 4-byte cuMemcpyDtoH); answers "done <CUresult>"
//   verify  checks both patterns at the same addresses and that a kernel still runs; answers
//           "verify <heap ok> <vmm ok> <kernel ok> <heap device> <vmm device> <context device>
//            <heap range start> <vmm range start> <bytes used on the context's device>
//            <simulated GPU behind the context's ordinal>"
//   exit    (or EOF) exits 0
int mode_checkpoint_target() {
  constexpr std::size_t kHeapBytes = 1 << 20, kVmmBytes = 4 << 20, kScratch = 256;
  constexpr std::uint32_t kHeapSeed = 1, kVmmSeed = 2;
  CUcontext ctx = init_device0();
  CUmodule module;
  CHILD_CHECK(cuModuleLoadData(&module, embedded::fidelity_kernels::fatbin.data));
  CUfunction affine;
  CHILD_CHECK(cuModuleGetFunction(&affine, module, embedded::fidelity_kernels::kernel::fid_affine));
  CUstream stream;
  CHILD_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  CUdeviceptr heap, scratch;
  CHILD_CHECK(cuMemAlloc(&heap, kHeapBytes));
  CHILD_CHECK(cuMemAlloc(&scratch, kScratch * 4));
  CUmemGenericAllocationHandle handle;
  CUdeviceptr vmm = vmm_alloc(kVmmBytes, &handle);
  std::vector<std::uint32_t> heap_words = pattern_words(kHeapSeed, kHeapBytes / 4);
  std::vector<std::uint32_t> vmm_words = pattern_words(kVmmSeed, kVmmBytes / 4);
  CHILD_CHECK(cuMemcpyHtoD(heap, heap_words.data(), kHeapBytes));
  CHILD_CHECK(cuMemcpyHtoD(vmm, vmm_words.data(), kVmmBytes));
  say("ready " + ptr_hex(heap) + " " + ptr_hex(vmm));

  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "probe") {
      std::uint32_t v = 0;
      say("done " + cu(cuMemcpyDtoH(&v, heap, 4)));
    } else if (line == "verify") {
      std::vector<std::uint32_t> h(kHeapBytes / 4), m(kVmmBytes / 4);
      CHILD_CHECK(cuMemcpyDtoH(h.data(), heap, kHeapBytes));
      CHILD_CHECK(cuMemcpyDtoH(m.data(), vmm, kVmmBytes));
      bool heap_ok = h == heap_words, vmm_ok = m == vmm_words;
      std::vector<std::uint32_t> x(kScratch);
      for (std::size_t i = 0; i < kScratch; ++i) x[i] = static_cast<std::uint32_t>(i);
      CHILD_CHECK(cuMemcpyHtoDAsync(scratch, x.data(), kScratch * 4, stream));
      unsigned k = 7;
      int n = static_cast<int>(kScratch);
      void* params[] = {&scratch, &k, &n};
      CHILD_CHECK(cuLaunchKernel(affine, 1, 1, 1, kScratch, 1, 1, 0, stream, params, nullptr));
      CHILD_CHECK(cuMemcpyDtoHAsync(x.data(), scratch, kScratch * 4, stream));
      CHILD_CHECK(cuStreamSynchronize(stream));
      bool kernel_ok = true;
      for (std::size_t i = 0; i < kScratch; ++i) kernel_ok = kernel_ok && x[i] == i * 3 + 7;
      int heap_dev = -1, vmm_dev = -1;
      CHILD_CHECK(cuPointerGetAttribute(&heap_dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, heap));
      CHILD_CHECK(cuPointerGetAttribute(&vmm_dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, vmm));
      CUdeviceptr heap_start = 0, vmm_start = 0;
      CHILD_CHECK(
          cuPointerGetAttribute(&heap_start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, heap + 100));
      CHILD_CHECK(
          cuPointerGetAttribute(&vmm_start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, vmm + 100));
      CUcontext current;
      CHILD_CHECK(cuCtxGetCurrent(&current));
      CUdevice ctx_dev = -1;
      CHILD_CHECK(cuCtxGetDevice(&ctx_dev));
      size_t free_bytes = 0, total = 0;
      CHILD_CHECK(cuMemGetInfo(&free_bytes, &total));
      // The simulated GPU behind the context's ordinal: simgpu's default UUIDs end in it.
      CUuuid uuid{};
      CHILD_CHECK(cuDeviceGetUuid(&uuid, ctx_dev));
      int gpu = static_cast<unsigned char>(uuid.bytes[15]);
      say("verify " + std::to_string(heap_ok) + " " + std::to_string(vmm_ok) + " " +
          std::to_string(kernel_ok && current == ctx) + " " + std::to_string(heap_dev) + " " +
          std::to_string(vmm_dev) + " " + std::to_string(ctx_dev) + " " + ptr_hex(heap_start) +
          " " + ptr_hex(vmm_start) + " " + std::to_string(total - free_bytes) + " " +
          std::to_string(gpu));
    } else if (line == "exit") {
      break;
    } else {
      say("unknown-command " + line);
    }
  }
  return 0;
}

// A process busy on the GPU: a kernel that runs for minutes, queued before "ready".
int mode_busy_target() {
  init_device0();
  CUmodule module;
  CHILD_CHECK(cuModuleLoadData(&module, embedded::fidelity_kernels::fatbin.data));
  CUfunction slow;
  CHILD_CHECK(
      cuModuleGetFunction(&slow, module, embedded::fidelity_kernels::kernel::fid_slow_fill));
  CUdeviceptr out;
  CHILD_CHECK(cuMemAlloc(&out, 4));
  unsigned value = 1;
  int n = 1;
  unsigned long long iters = 1ull << 40;
  void* params[] = {&out, &value, &n, &iters};
  CHILD_CHECK(cuLaunchKernel(slow, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));
  say("ready");
  std::string line;
  std::getline(std::cin, line);
  return 0;
}

}  // namespace

int run_child_mode(int argc, char** argv) {
  std::string mode = argv[0];
  if (mode == "uninit") return mode_uninit();
  if (mode == "uuids") return mode_uuids();
  if (mode == "deref" && argc == 2) return mode_deref(argv[1]);
  if (mode == "vmm-import" && argc == 5)
    return mode_vmm_import(std::atoi(argv[1]), std::strtoull(argv[2], nullptr, 0),
                           static_cast<std::uint32_t>(std::atoi(argv[3])),
                           static_cast<std::uint32_t>(std::atoi(argv[4])));
  if (mode == "checkpoint-target") return mode_checkpoint_target();
  if (mode == "busy-target") return mode_busy_target();
  if (int r = run_ipc_child_mode(argc, argv); r >= 0) return r;
  std::fprintf(stderr, "unknown child mode %s (or wrong arguments)\n", mode.c_str());
  return 2;
}

}  // namespace fid
