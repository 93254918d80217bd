// The child modes of the interposer tests: small CUDA programs that a test starts under gcr
// (`interpose_test --child <mode> ...`) and drives through stdin while it inspects them from
// outside (control channel, /proc). Each prints what it did, one fact per line ("ptr <label>
// 0x<address> <bytes> ...", "ready", "done", ...), and flushes after every line.
//
// They run outside Catch2, so a failed driver call prints "error <call> <CUresult name>" and
// exits 2.
#include <dirent.h>
#include <dlfcn.h>
#include <grp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "common.h"
#include "probe_kernels_fatbin.h"

namespace ipt {
namespace {

void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void say(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vprintf(fmt, ap);
  va_end(ap);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

const char* name_of(CUresult r) {
  const char* name = nullptr;
  return cuGetErrorName(r, &name) == CUDA_SUCCESS && name ? name : "unknown";
}

#define CHILD_CU(call)                              \
  do {                                              \
    CUresult child_r_ = (call);                     \
    if (child_r_ != CUDA_SUCCESS) {                 \
      say("error %s %s", #call, name_of(child_r_)); \
      std::exit(2);                                 \
    }                                               \
  } while (0)

std::string next_command() {
  std::string line;
  if (!std::getline(std::cin, line)) return "eof";
  return line;
}

CUcontext context_of(int ordinal) {
  static CUcontext contexts[2] = {};
  if (!contexts[ordinal]) {
    CHILD_CU(cuInit(0));
    CUdevice dev;
    CHILD_CU(cuDeviceGet(&dev, ordinal));
    CHILD_CU(cuDevicePrimaryCtxRetain(&contexts[ordinal], dev));
  }
  CHILD_CU(cuCtxSetCurrent(contexts[ordinal]));
  return contexts[ordinal];
}

struct ChildKernels {
  CUfunction fill = nullptr, add = nullptr, copy = nullptr, nop = nullptr;
};

ChildKernels load_kernels() {
  context_of(0);
  CUmodule m;
  CHILD_CU(cuModuleLoadData(&m, embedded::probe_kernels::fatbin.data));
  namespace names = embedded::probe_kernels::kernel;
  ChildKernels k;
  CHILD_CU(cuModuleGetFunction(&k.fill, m, names::probe_fill));
  CHILD_CU(cuModuleGetFunction(&k.add, m, names::probe_add));
  CHILD_CU(cuModuleGetFunction(&k.copy, m, names::probe_copy));
  CHILD_CU(cuModuleGetFunction(&k.nop, m, names::probe_nop));
  return k;
}

template <typename... Args>
void child_launch(CUfunction f, int n, CUstream stream, Args... args) {
  void* params[] = {static_cast<void*>(&args)..., nullptr};
  unsigned grid = static_cast<unsigned>((n + 127) / 128);
  CHILD_CU(cuLaunchKernel(f, grid ? grid : 1, 1, 1, 128, 1, 1, 0, stream, params, nullptr));
}

void print_ptr(const char* label, CUdeviceptr p, std::uint64_t bytes,
               const std::string& extra = {}) {
  say("ptr %s 0x%llx %llu%s%s", label, static_cast<unsigned long long>(p),
      static_cast<unsigned long long>(bytes), extra.empty() ? "" : " ", extra.c_str());
}

bool has_gcr_control_fd() {
  for (const std::string& t : fd_targets(getpid()))
    if (t.find("gcr-control") != std::string::npos) return true;
  return false;
}

// The program's own VMM allocation: reserve (no hint), create, map, set access.
struct UserMapping {
  CUdeviceptr va = 0;
  std::size_t size = 0;
  CUmemGenericAllocationHandle handle = 0;
};

UserMapping map_user(int device, std::size_t at_least) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  std::size_t granularity = 0;
  CHILD_CU(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  UserMapping m;
  m.size = (at_least + granularity - 1) / granularity * granularity;
  CHILD_CU(cuMemAddressReserve(&m.va, m.size, 0, 0, 0));
  CHILD_CU(cuMemCreate(&m.handle, m.size, &prop, 0));
  CHILD_CU(cuMemMap(m.va, m.size, 0, m.handle, 0));
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHILD_CU(cuMemSetAccess(m.va, m.size, &access, 1));
  return m;
}

void unmap_user(const UserMapping& m) {
  CHILD_CU(cuMemUnmap(m.va, m.size));
  CHILD_CU(cuMemRelease(m.handle));
  CHILD_CU(cuMemAddressFree(m.va, m.size));
}

// Writes `bytes` of the allocation with a memset and reads the last word back: it is usable.
void touch(CUdeviceptr p, std::uint64_t bytes, unsigned value) {
  CHILD_CU(cuMemsetD32(p, value, bytes / 4));
  unsigned last = 0;
  CHILD_CU(cuMemcpyDtoH(&last, p + (bytes / 4 - 1) * 4, 4));
  if (last != value) {
    say("error touch 0x%llx: read %u, wrote %u", static_cast<unsigned long long>(p), last, value);
    std::exit(1);
  }
}

// ---- alloc-paths: one allocation through every path, then frees them all ------------------

int mode_alloc_paths() {
  CUcontext ctx0 = context_of(0);
  (void)ctx0;
  CUdevice dev0;
  CHILD_CU(cuDeviceGet(&dev0, 0));
  CUstream stream;
  CHILD_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  struct Sync {
    const char* label;
    std::uint64_t bytes;
    CUdeviceptr p = 0;
    int device = 0;
  };
  std::vector<Sync> sync = {
      {"alloc_small", 4096}, {"alloc_small2", 100000}, {"alloc_large", (3ull << 20) + 123}};
  for (Sync& s : sync) CHILD_CU(cuMemAlloc_v2(&s.p, s.bytes));

  CUdeviceptr pitched = 0;
  std::size_t pitch = 0;
  CHILD_CU(cuMemAllocPitch_v2(&pitched, &pitch, 1000, 37, 4));

  CUdeviceptr async_small = 0, async_large = 0, pooled = 0;
  CHILD_CU(cuMemAllocAsync(&async_small, 65536, stream));
  CHILD_CU(cuMemAllocAsync(&async_large, 5ull << 20, stream));
  CUmemoryPool pool;
  CHILD_CU(cuDeviceGetDefaultMemPool(&pool, dev0));
  CHILD_CU(cuMemAllocFromPoolAsync(&pooled, 8192, pool, stream));
  CHILD_CU(cuStreamSynchronize(stream));

  UserMapping user = map_user(0, 3ull << 20);

  context_of(1);
  std::vector<Sync> dev1 = {{"dev1_small", 4096, 0, 1}, {"dev1_large", (5ull << 19)}};
  dev1[1].device = 1;
  for (Sync& s : dev1) CHILD_CU(cuMemAlloc_v2(&s.p, s.bytes));
  for (Sync& s : dev1) touch(s.p, s.bytes, 0x1111u);
  // Stream-ordered allocations come from the stream's device, or the pool's: not the current
  // context's. A stream and a pool of device 1, used while device 0's context is current.
  CUstream stream1;
  CHILD_CU(cuStreamCreate(&stream1, CU_STREAM_NON_BLOCKING));
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 1;
  CUmemoryPool pool1;
  CHILD_CU(cuMemPoolCreate(&pool1, &props));
  context_of(0);
  CUdeviceptr async_dev1 = 0, pooled_dev1 = 0;
  CHILD_CU(cuMemAllocAsync(&async_dev1, 65536, stream1));
  CHILD_CU(cuMemAllocFromPoolAsync(&pooled_dev1, 8192, pool1, stream));
  CHILD_CU(cuStreamSynchronize(stream1));
  CHILD_CU(cuStreamSynchronize(stream));
  context_of(1);
  touch(async_dev1, 65536, 0x2222u);
  touch(pooled_dev1, 8192, 0x3333u);
  context_of(0);

  unsigned value = 1;
  for (Sync& s : sync) touch(s.p, s.bytes, value++);
  touch(pitched, pitch * 37, value++);
  touch(async_small, 65536, value++);
  touch(async_large, 5ull << 20, value++);
  touch(pooled, 8192, value++);
  touch(user.va, user.size, value++);

  for (Sync& s : sync) print_ptr(s.label, s.p, s.bytes, "0");
  print_ptr("pitch", pitched, pitch * 37, "0");
  print_ptr("async_small", async_small, 65536, "0");
  print_ptr("async_large", async_large, 5ull << 20, "0");
  print_ptr("pool_default", pooled, 8192, "0");
  print_ptr("vmm_user", user.va, user.size, "0");
  for (Sync& s : dev1) print_ptr(s.label, s.p, s.bytes, "1");
  print_ptr("async_dev1_stream", async_dev1, 65536, "1");
  print_ptr("pool_dev1", pooled_dev1, 8192, "1");
  say("ready");

  if (next_command() != "free") return 0;
  for (Sync& s : sync) CHILD_CU(cuMemFree_v2(s.p));
  CHILD_CU(cuMemFree_v2(pitched));
  CHILD_CU(cuMemFreeAsync(async_small, stream));
  CHILD_CU(cuMemFreeAsync(async_large, stream));
  CHILD_CU(cuMemFreeAsync(pooled, stream));
  CHILD_CU(cuMemFreeAsync(pooled_dev1, stream));
  CHILD_CU(cuStreamSynchronize(stream));
  unmap_user(user);
  context_of(1);
  CHILD_CU(cuMemFreeAsync(async_dev1, stream1));
  CHILD_CU(cuStreamSynchronize(stream1));
  CHILD_CU(cuMemPoolDestroy(pool1));
  for (Sync& s : dev1) CHILD_CU(cuMemFree_v2(s.p));
  context_of(0);
  say("freed");
  next_command();
  return 0;
}

// ---- track: buffers in regions of their own, and launches on command -----------------------

int mode_track() {
  ChildKernels k = load_kernels();
  constexpr std::uint64_t kBytes = 2ull << 20;
  constexpr int n = static_cast<int>(kBytes / 4);
  CUdeviceptr a, b, c;
  for (CUdeviceptr* p : {&a, &b, &c}) {
    CHILD_CU(cuMemAlloc_v2(p, kBytes));
    CHILD_CU(cuMemsetD32(*p, 5, n));
  }
  UserMapping d = map_user(0, 4ull << 20);  // the program's own VMM mapping
  CHILD_CU(cuCtxSynchronize());
  print_ptr("a", a, kBytes);
  print_ptr("b", b, kBytes);
  print_ptr("c", c, kBytes);
  print_ptr("d", d.va, d.size);
  say("ready");
  for (std::string cmd = next_command(); cmd != "exit" && cmd != "eof"; cmd = next_command()) {
    if (cmd == "copy") {
      child_launch(k.copy, n, nullptr, a, b, n);  // writes a, reads b
    } else if (cmd == "nop") {
      child_launch(k.nop, 1, nullptr, 1, 0x5eedull);
    } else if (cmd == "fill-d") {
      child_launch(k.fill, n, nullptr, d.va, 4u, n);
    }
    CHILD_CU(cuCtxSynchronize());
    say("done %s", cmd.c_str());
  }
  return 0;
}

// ---- threads N: N threads launching in loops until told to stop ----------------------------

int mode_threads(int n_threads) {
  ChildKernels k = load_kernels();
  CUcontext ctx = context_of(0);
  constexpr int n = 1024;
  std::atomic<bool> stop{false};
  std::vector<std::atomic<std::uint64_t>> counts(static_cast<std::size_t>(n_threads));
  std::vector<CUdeviceptr> buffers(static_cast<std::size_t>(n_threads));
  std::vector<std::thread> threads;
  for (int t = 0; t < n_threads; ++t) {
    CHILD_CU(cuMemAlloc_v2(&buffers[t], n * 4));
    CHILD_CU(cuMemsetD32(buffers[t], 0, n));
  }
  CHILD_CU(cuCtxSynchronize());
  for (int t = 0; t < n_threads; ++t) {
    threads.emplace_back([&, t] {
      CHILD_CU(cuCtxSetCurrent(ctx));
      CUstream s;
      CHILD_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
      unsigned one = 1;
      while (!stop.load()) {
        child_launch(k.add, n, s, buffers[t], one, n);
        CHILD_CU(cuStreamSynchronize(s));
        counts[t].fetch_add(1);
      }
      CHILD_CU(cuStreamDestroy(s));
    });
  }
  say("ready");
  for (std::string cmd = next_command(); cmd != "eof"; cmd = next_command()) {
    if (cmd == "counts") {
      std::string line = "counts";
      for (auto& c : counts) line += " " + std::to_string(c.load());
      say("%s", line.c_str());
    } else if (cmd == "stop") {
      break;
    }
  }
  stop = true;
  for (auto& t : threads) t.join();
  std::vector<unsigned> host(n);
  for (int t = 0; t < n_threads; ++t) {
    CHILD_CU(cuMemcpyDtoH(host.data(), buffers[t], n * 4));
    for (int i = 0; i < n; ++i)
      if (host[i] != static_cast<unsigned>(counts[t].load())) {
        say("bad thread %d element %d: %u, want %llu", t, i, host[i],
            static_cast<unsigned long long>(counts[t].load()));
        return 1;
      }
  }
  say("stopped ok");
  return 0;
}

// ---- park: patterned buffers of every kind, verified on command ----------------------------

int mode_park() {
  ChildKernels k = load_kernels();
  struct Buf {
    const char* label;
    std::uint64_t bytes;
    unsigned seed;
    int device = 0;
    CUdeviceptr p = 0;
  };
  std::vector<Buf> bufs = {
      {"slab_a", 65536, 11}, {"slab_b", 300 * 1024, 12}, {"large", (3ull << 20) + 4096, 13}};
  for (Buf& b : bufs) CHILD_CU(cuMemAlloc_v2(&b.p, b.bytes));
  UserMapping user = map_user(0, 4ull << 20);
  bufs.push_back({"vmm_user", user.size, 14, 0, user.va});
  for (Buf& b : bufs)
    child_launch(k.fill, static_cast<int>(b.bytes / 4), nullptr, b.p, b.seed,
                 static_cast<int>(b.bytes / 4));
  CHILD_CU(cuCtxSynchronize());

  context_of(1);  // device 1: filled from the host
  Buf d1{"dev1", (5ull << 19), 15, 1};
  CHILD_CU(cuMemAlloc_v2(&d1.p, d1.bytes));
  {
    std::vector<unsigned> host(d1.bytes / 4);
    for (std::size_t i = 0; i < host.size(); ++i)
      host[i] = probe_word(d1.seed, static_cast<unsigned>(i));
    CHILD_CU(cuMemcpyHtoD(d1.p, host.data(), d1.bytes));
  }
  bufs.push_back(d1);
  context_of(0);

  for (Buf& b : bufs)
    print_ptr(b.label, b.p, b.bytes, std::to_string(b.seed) + " " + std::to_string(b.device));
  say("ready");
  for (std::string cmd = next_command(); cmd != "exit" && cmd != "eof"; cmd = next_command()) {
    if (cmd != "verify") continue;
    // The data, at the same addresses; then compute on it: x + 7 everywhere.
    for (Buf& b : bufs) {
      context_of(b.device);
      std::vector<unsigned> host(b.bytes / 4);
      CHILD_CU(cuMemcpyDtoH(host.data(), b.p, b.bytes));
      for (std::size_t i = 0; i < host.size(); ++i)
        if (host[i] != probe_word(b.seed, static_cast<unsigned>(i))) {
          say("verify bad %s word %zu: 0x%08x, want 0x%08x", b.label, i, host[i],
              probe_word(b.seed, static_cast<unsigned>(i)));
          return 1;
        }
      int n = static_cast<int>(b.bytes / 4);
      if (b.device == 0) {
        child_launch(k.add, n, nullptr, b.p, 7u, n);
      } else {
        for (auto& w : host) w += 7;
        CHILD_CU(cuMemcpyHtoD(b.p, host.data(), b.bytes));
      }
      CHILD_CU(cuCtxSynchronize());
      CHILD_CU(cuMemcpyDtoH(host.data(), b.p, b.bytes));
      for (std::size_t i = 0; i < host.size(); ++i)
        if (host[i] != probe_word(b.seed, static_cast<unsigned>(i)) + 7u) {
          say("compute bad %s word %zu", b.label, i);
          return 1;
        }
      // Back to the pattern, so that verify can run again.
      if (b.device == 0)
        child_launch(k.fill, n, nullptr, b.p, b.seed, n);
      else
        for (std::size_t i = 0; i < host.size(); ++i) host[i] -= 7;
      if (b.device == 1) CHILD_CU(cuMemcpyHtoD(b.p, host.data(), b.bytes));
      CHILD_CU(cuCtxSynchronize());
    }
    context_of(0);
    say("verified ok");
  }
  return 0;
}

// ---- fork: a CUDA process forks; the child must be left alone --------------------------------

int mode_fork() {
  ChildKernels k = load_kernels();
  CUdeviceptr x;
  constexpr int n = 4096;
  CHILD_CU(cuMemAlloc_v2(&x, n * 4));
  child_launch(k.fill, n, nullptr, x, 3u, n);
  CHILD_CU(cuCtxSynchronize());
  say("parent mailbox %d", has_gcr_control_fd() ? 1 : 0);
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    say("error fork %s", std::strerror(errno));
    return 2;
  }
  if (pid == 0) {
    alarm(20);  // a hang is reported by the test as a missing line; never outlive it
    say("child pid %d", static_cast<int>(getpid()));
    say("child mailbox %d", has_gcr_control_fd() ? 1 : 0);
    int count = -1;
    CUresult r = cuDeviceGetCount(&count);
    say("child cuDeviceGetCount %s %d", name_of(r), count);
    CUdeviceptr d = 0;
    r = cuMemAlloc_v2(&d, 4096);
    say("child cuMemAlloc_v2 %s", name_of(r));
    say("child done");
    for (;;) pause();  // until the parent kills it
  }
  // The parent goes on computing, still managed.
  child_launch(k.add, n, nullptr, x, 1u, n);
  CHILD_CU(cuCtxSynchronize());
  std::vector<unsigned> host(n);
  CHILD_CU(cuMemcpyDtoH(host.data(), x, n * 4));
  bool good = true;
  for (int i = 0; i < n; ++i)
    good = good && host[i] == probe_word(3u, static_cast<unsigned>(i)) + 1u;
  say("parent compute %s", good ? "ok" : "bad");
  say("ready");
  next_command();
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  return 0;
}

// ---- gate: driver calls made on command, to see the API gate hold them ----------------------

int mode_gate() {
  context_of(0);
  CUdeviceptr x;
  CHILD_CU(cuMemAlloc_v2(&x, 4096));
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  constexpr std::size_t kSize = 2ull << 20;
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle handle = 0;
  CHILD_CU(
      cuMemAddressReserve(&va, kSize, 0, 0, 0));  // reserved and created now, mapped on command
  CHILD_CU(cuMemCreate(&handle, kSize, &prop, 0));
  print_ptr("x", x, 4096);
  say("ready");
  // On this thread, whose context is current: nothing but the call itself meets the gate.
  CUcontext made = nullptr;
  for (std::string cmd = next_command(); cmd != "exit" && cmd != "eof"; cmd = next_command()) {
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    if (cmd == "map") {
      r = cuMemMap(va, kSize, 0, handle, 0);
    } else if (cmd == "unmap") {
      r = cuMemUnmap(va, kSize);
    } else if (cmd == "attribute") {
      CUdeviceptr start = 0;
      r = cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, x);
    } else if (cmd == "range") {
      CUdeviceptr base = 0;
      std::size_t size = 0;
      r = cuMemGetAddressRange(&base, &size, x);
    } else if (cmd == "pool") {
      CUmemoryPool pool;
      r = cuDeviceGetDefaultMemPool(&pool, 0);
    } else if (cmd == "memset") {
      r = cuMemsetD32(x, 1, 16);
    } else if (cmd == "retain") {
      CUcontext c;
      r = cuDevicePrimaryCtxRetain(&c, 0);
    } else if (cmd == "ctx-create") {
      // What a program built against CUDA 12's cuda.h calls for cuCtxCreate.
      using CreateV2 = CUresult (*)(CUcontext*, unsigned int, CUdevice);
      auto create_v2 = reinterpret_cast<CreateV2>(dlsym(RTLD_DEFAULT, "cuCtxCreate_v2"));
      r = create_v2 ? create_v2(&made, 0, 0) : CUDA_ERROR_NOT_FOUND;
    } else if (cmd == "ctx-destroy") {
      r = cuCtxDestroy(made);
    }
    // Not name_of(): cuGetErrorName is a driver call too, and would wait at the gate itself.
    say("returned %s %s", cmd.c_str(),
        r == CUDA_SUCCESS ? "CUDA_SUCCESS" : ("CUresult(" + std::to_string(r) + ")").c_str());
    context_of(0);  // cuCtxCreate made its context current
  }
  return 0;
}

// ---- wait: a managed process doing nothing -------------------------------------------------

int mode_wait() {
  context_of(0);
  CUdeviceptr x;
  CHILD_CU(cuMemAlloc_v2(&x, 4096));
  say("ready");
  next_command();
  return 0;
}

// ---- connect-as UID PID FD: a client of another uid (run as root) ---------------------------

int mode_connect_as(uid_t uid, pid_t pid, int mailbox_fd) {
  if (setgroups(0, nullptr) != 0 || setgid(uid) != 0 || setuid(uid) != 0) {
    say("error setuid %s", std::strerror(errno));
    return 2;
  }
  say("uid %u", static_cast<unsigned>(getuid()));
  auto via_fd =
      control::Client::connect_mailbox(pid, gcr::UniqueFd(mailbox_fd), std::chrono::seconds(5));
  if (via_fd)
    say("mailbox connected");
  else
    say("mailbox refused %s %s", gcr::errc_name(via_fd.error().code),
        via_fd.error().message.c_str());
  auto direct = control::Client::connect(pid, std::chrono::seconds(5));
  if (direct)
    say("pid connected");
  else
    say("pid refused %s %s", gcr::errc_name(direct.error().code), direct.error().message.c_str());
  return 0;
}

// ---- handles: the program's own allocation handles (Note [Virtual allocation handles]) ------
// An expandable segment of four 2 MiB pages whose handles it keeps, one more allocation written
// and then unmapped but held, and answers about handles that must match the driver's. On
// "verify": the data where it was (the held page mapped again first), then computed on. On
// "share": one page exported as a POSIX fd (kept open), which makes it unparkable.

std::string handle_checks(CUdeviceptr slab_memory, CUmemGenericAllocationHandle page,
                          CUdeviceptr page_address) {
  std::string bad;
  auto check = [&](bool good, const char* what) {
    if (!good) bad += std::string(bad.empty() ? "" : ", ") + what;
  };
  CUmemAllocationProp prop{};
  check(cuMemGetAllocationPropertiesFromHandle(&prop, page) == CUDA_SUCCESS &&
            prop.requestedHandleTypes == CU_MEM_HANDLE_TYPE_NONE,
        "properties are the ones asked for");
  CUmemGenericAllocationHandle retained = 0;
  check(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(page_address + 4096)) ==
                CUDA_SUCCESS &&
            retained == page,
        "retain at an address inside a page returns its handle");
  check(cuMemRelease(retained) == CUDA_SUCCESS, "the retained reference releases");
  check(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(slab_memory)) ==
            CUDA_ERROR_INVALID_VALUE,
        "cuMemAlloc memory has no allocation handle");
  check(cuMemRelease(page ^ 0x5555) == CUDA_ERROR_INVALID_VALUE, "a made-up handle is refused");
  CUmemAllocationProp fabric = prop;
  fabric.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
  CUmemGenericAllocationHandle h = 0;
  check(cuMemCreate(&h, 2u << 20, &fabric, 0) == CUDA_ERROR_NOT_SUPPORTED,
        "FABRIC handles are refused");
  int multicast = -1;
  check(cuDeviceGetAttribute(&multicast, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, 0) ==
                CUDA_SUCCESS &&
            multicast == 0,
        "multicast reads as unsupported");
  return bad.empty() ? "ok" : "bad: " + bad;
}

int mode_handles() {
  constexpr int kIpcWords = 16384;
  ChildKernels k = load_kernels();
  constexpr std::size_t kPage = 2u << 20;
  constexpr int kPages = 4;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUdeviceptr segment = 0, spare_va = 0, slab = 0;
  CHILD_CU(cuMemAddressReserve(&segment, kPage * kPages, 0, 0, 0));
  CHILD_CU(cuMemAddressReserve(&spare_va, kPage, 0, 0, 0));
  CHILD_CU(cuMemAlloc_v2(&slab, 4096));
  CUmemGenericAllocationHandle pages[kPages] = {}, spare = 0;
  for (int i = 0; i < kPages; ++i) {
    CHILD_CU(cuMemCreate(&pages[i], kPage, &prop, 0));
    CHILD_CU(cuMemMap(segment + i * kPage, kPage, 0, pages[i], 0));
    CHILD_CU(cuMemSetAccess(segment + i * kPage, kPage, &access, 1));
  }
  CHILD_CU(cuMemCreate(&spare, kPage, &prop, 0));
  CHILD_CU(cuMemMap(spare_va, kPage, 0, spare, 0));
  CHILD_CU(cuMemSetAccess(spare_va, kPage, &access, 1));
  const int n = static_cast<int>(kPage * kPages / 4), m = static_cast<int>(kPage / 4);
  child_launch(k.fill, n, nullptr, segment, 21u, n);
  child_launch(k.fill, m, nullptr, spare_va, 22u, m);
  CHILD_CU(cuCtxSynchronize());
  CHILD_CU(cuMemUnmap(spare_va, kPage));  // held by its handle alone from here
  say("checks %s", handle_checks(slab, pages[1], segment + kPage).c_str());
  say("ready");
  int shared_fd = -1;
  for (std::string cmd = next_command(); cmd != "exit" && cmd != "eof"; cmd = next_command()) {
    if (cmd == "share") {
      CUmemAllocationProp shareable = prop;
      shareable.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
      CUmemGenericAllocationHandle h = 0;
      CUdeviceptr va = 0;
      CHILD_CU(cuMemAddressReserve(&va, kPage, 0, 0, 0));
      CHILD_CU(cuMemCreate(&h, kPage, &shareable, 0));
      CHILD_CU(cuMemMap(va, kPage, 0, h, 0));
      CHILD_CU(
          cuMemExportToShareableHandle(&shared_fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
      say("shared");
      continue;
    }
    if (cmd == "ipc-export") {  // 64 KiB of cuMemAlloc memory (in a slab), shared by token
      CUdeviceptr d = 0;
      CHILD_CU(cuMemAlloc_v2(&d, kIpcWords * 4));
      child_launch(k.fill, kIpcWords, nullptr, d, 23u, kIpcWords);
      CHILD_CU(cuCtxSynchronize());
      CUipcMemHandle h{};
      CHILD_CU(cuIpcGetMemHandle(&h, d));
      std::string hex;
      for (unsigned char c : h.reserved) {
        char b[3];
        std::snprintf(b, sizeof b, "%02x", c);
        hex += b;
      }
      say("ipc %s", hex.c_str());
      continue;
    }
    if (cmd.rfind("ipc-open ", 0) == 0) {  // opens a token, checks the owner's bytes
      CUipcMemHandle h{};
      std::string hex = cmd.substr(9);
      for (std::size_t i = 0; i < sizeof h.reserved && 2 * i + 1 < hex.size(); ++i)
        h.reserved[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
      CUdeviceptr d = 0;
      CUresult r = cuIpcOpenMemHandle_v2(&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
      if (r != CUDA_SUCCESS) {
        say("opened error %d", static_cast<int>(r));
        continue;
      }
      std::vector<unsigned> host(kIpcWords);
      CHILD_CU(cuMemcpyDtoH(host.data(), d, kIpcWords * 4ull));
      std::string result = "ok";
      for (int i = 0; i < kIpcWords && result == "ok"; ++i)
        if (host[i] != probe_word(23u, static_cast<unsigned>(i)))
          result = "bad at word " + std::to_string(i);
      say("opened %s", result.c_str());
      continue;
    }
    if (cmd != "verify") continue;
    CHILD_CU(cuMemMap(spare_va, kPage, 0, spare, 0));
    CHILD_CU(cuMemSetAccess(spare_va, kPage, &access, 1));
    const std::pair<CUdeviceptr, std::pair<int, unsigned>> bufs[] = {{segment, {n, 21u}},
                                                                     {spare_va, {m, 22u}}};
    std::string result = "ok";
    for (const auto& [p, what] : bufs) {
      const auto [words, seed] = what;
      child_launch(k.add, words, nullptr, p, 7u, words);
      CHILD_CU(cuCtxSynchronize());
      std::vector<unsigned> host(words);
      CHILD_CU(cuMemcpyDtoH(host.data(), p, words * 4ull));
      for (int i = 0; i < words && result == "ok"; ++i)
        if (host[i] != probe_word(seed, static_cast<unsigned>(i)) + 7u)
          result = "bad at seed " + std::to_string(seed) + " word " + std::to_string(i);
    }
    CHILD_CU(cuMemUnmap(segment, kPage * kPages));
    CHILD_CU(cuMemUnmap(spare_va, kPage));
    for (CUmemGenericAllocationHandle h : pages) CHILD_CU(cuMemRelease(h));
    CHILD_CU(cuMemRelease(spare));
    say("verified %s", result.c_str());
  }
  return 0;
}

}  // namespace

int run_child_mode(int argc, char** argv) {
  std::string mode = argv[0];
  if (mode == "alloc-paths") return mode_alloc_paths();
  if (mode == "track") return mode_track();
  if (mode == "threads" && argc >= 2) return mode_threads(std::atoi(argv[1]));
  if (mode == "park") return mode_park();
  if (mode == "handles") return mode_handles();
  if (mode == "fork") return mode_fork();
  if (mode == "wait") return mode_wait();
  if (mode == "gate") return mode_gate();
  if (mode == "connect-as" && argc >= 4)
    return mode_connect_as(static_cast<uid_t>(std::atoi(argv[1])),
                           static_cast<pid_t>(std::atoi(argv[2])), std::atoi(argv[3]));
  std::fprintf(stderr, "unknown child mode '%s'\n", mode.c_str());
  return 2;
}

}  // namespace ipt
