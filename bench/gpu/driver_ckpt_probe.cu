// bench/gpu/driver_ckpt_probe.cu: what the driver's own checkpoint does, measured on the driver
// at hand (the questions simgpu answers by assumption; docs/gpu-results.md). Driver API only.
//
//   nvcc -O2 -o driver_ckpt_probe bench/gpu/driver_ckpt_probe.cu -lcuda
//   driver_ckpt_probe [--bytes SIZE] [--parked]
//
// A child process makes a context, a VMM reservation with a mapping (2 MiB, patterned), and
// --bytes of cuMemAlloc ballast (default 1G); with --parked it frees the ballast again before the
// checkpoint, as gcr does when it parks device memory in gcrd. Two child threads run throughout:
// one calls cuCtxSynchronize every millisecond (as the interposer's own threads call the driver),
// one only sleeps. The parent then times cuCheckpointProcessLock, Checkpoint, Restore and Unlock
// on the child, lists the child's threads before and after (the driver's worker thread), and the
// child checks that the reservation, mapping and data came back at the same addresses.
// Prints "@kit key=value" lines for bench/gpu/summarize.py.
#include <cuda.h>
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

const char* err_name(CUresult r) {
  const char* n = "?";
  cuGetErrorName(r, &n);
  return n;
}
#define CK(x)                                                                \
  do {                                                                       \
    CUresult r_ = (x);                                                       \
    if (r_ != CUDA_SUCCESS) {                                                \
      std::fprintf(stderr, "driver_ckpt_probe: %s: %s\n", #x, err_name(r_)); \
      std::printf("@kit error=%s:%s\n", #x, err_name(r_));                   \
      std::fflush(stdout);                                                   \
      std::_Exit(1);                                                         \
    }                                                                        \
  } while (0)

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

std::string read_line(int fd) {
  std::string s;
  char c;
  while (read(fd, &c, 1) == 1 && c != '\n') s += c;
  return s;
}
void write_line(int fd, const std::string& s) {
  std::string l = s + "\n";
  if (write(fd, l.data(), l.size()) < 0) std::perror("write");
}

std::vector<std::string> threads_of(pid_t pid) {  // "tid:comm"
  std::vector<std::string> out;
  std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string comm;
    if (FILE* f = std::fopen((dir + "/" + e->d_name + "/comm").c_str(), "r")) {
      char buf[64] = {};
      if (std::fgets(buf, sizeof buf, f)) comm = buf;
      std::fclose(f);
    }
    while (!comm.empty() && (comm.back() == '\n' || comm.back() == ' ')) comm.pop_back();
    for (char& c : comm)
      if (c == ' ' || c == ',') c = '_';
    out.push_back(std::string(e->d_name) + ":" + comm);
  }
  closedir(d);
  return out;
}
std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s.empty() ? "-" : s;
}

constexpr unsigned kPattern = 0x5eedf00d;

// The child: sets up, reports "ready", waits for "verify", checks, reports, exits.
int child(int in, int out, size_t bytes, bool parked) {
  CK(cuInit(0));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  size_t gran = 0;
  CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  size_t vsize = ((size_t(2) << 20) + gran - 1) / gran * gran;
  CUdeviceptr vmm = 0;
  CK(cuMemAddressReserve(&vmm, vsize * 2, 0, 0, 0));  // reserve two, map one
  CUmemGenericAllocationHandle h;
  CK(cuMemCreate(&h, vsize, &prop, 0));
  CK(cuMemMap(vmm, vsize, 0, h, 0));
  CUmemAccessDesc acc{};
  acc.location = prop.location;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CK(cuMemSetAccess(vmm, vsize, &acc, 1));
  CK(cuMemsetD32(vmm, kPattern, vsize / 4));
  CUdeviceptr heap = 0;
  if (bytes) {
    CK(cuMemAlloc(&heap, bytes));
    CK(cuMemsetD8(heap, 0xab, bytes));
    if (parked) {
      CK(cuMemFree(heap));
      heap = 0;
    }
  }
  CK(cuCtxSynchronize());

  std::atomic<bool> stop{false};
  std::atomic<double> cuda_gap{0}, plain_gap{0};
  auto gap_loop = [&](bool cuda, std::atomic<double>& gap) {
    if (cuda) cuCtxSetCurrent(ctx);
    auto last = Clock::now();
    while (!stop) {
      if (cuda) cuCtxSynchronize();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      double g = ms_since(last);
      if (g > gap) gap = g;
      last = Clock::now();
    }
  };
  std::thread tc(gap_loop, true, std::ref(cuda_gap));
  std::thread tp(gap_loop, false, std::ref(plain_gap));
  char ready[128];
  std::snprintf(ready, sizeof ready, "ready %llx %zx", (unsigned long long)vmm, vsize);
  write_line(out, ready);
  if (read_line(in) != "verify") return 3;
  stop = true;
  tc.join();
  tp.join();
  CUdeviceptr base = 0;
  size_t len = 0;
  CUresult rr = cuMemGetAddressRange(&base, &len, vmm);
  std::vector<unsigned> host(vsize / 4);
  CUresult rc = cuMemcpyDtoH(host.data(), vmm, vsize);
  bool data_ok = rc == CUDA_SUCCESS;
  for (size_t i = 0; data_ok && i < host.size(); ++i) data_ok = host[i] == kPattern;
  // The unmapped half of the reservation must still be ours: map into it.
  CUmemGenericAllocationHandle h2;
  CUresult rm = cuMemCreate(&h2, vsize, &prop, 0);
  if (rm == CUDA_SUCCESS) rm = cuMemMap(vmm + vsize, vsize, 0, h2, 0);
  char line[512];
  std::snprintf(line, sizeof line,
                "verified vmm_range=%s vmm_same_addr=%d data_ok=%d map_into_reservation=%s "
                "cuda_thread_max_gap_ms=%.1f plain_thread_max_gap_ms=%.1f",
                err_name(rr), rr == CUDA_SUCCESS && base == vmm && len == vsize, data_ok,
                err_name(rm), cuda_gap.load(), plain_gap.load());
  write_line(out, line);
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  size_t bytes = size_t(1) << 30;
  bool parked = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--bytes") && i + 1 < argc)
      bytes = parse_size(argv[++i]);
    else if (!std::strcmp(argv[i], "--parked"))
      parked = true;
    else {
      std::fprintf(stderr, "usage: driver_ckpt_probe [--bytes SIZE] [--parked]\n");
      return 2;
    }
  }
  int to_child[2], from_child[2];
  if (pipe(to_child) || pipe(from_child)) return 1;
  pid_t pid = fork();
  if (pid == 0) {
    close(to_child[1]);
    close(from_child[0]);
    std::_Exit(child(to_child[0], from_child[1], bytes, parked));
  }
  close(to_child[0]);
  close(from_child[1]);
  std::string ready = read_line(from_child[0]);
  if (ready.rfind("ready ", 0) != 0) {
    std::printf("@kit error=child_not_ready\n");
    return 1;
  }
  std::printf("@kit mode=%s ballast_bytes=%zu child=%d\n", parked ? "parked" : "resident", bytes,
              pid);
  std::printf("@kit threads_before=%s\n", join(threads_of(pid)).c_str());
  CK(cuInit(0));
  int tid = 0;
  CUresult rt = cuCheckpointProcessGetRestoreThreadId(pid, &tid);
  std::string comm = "-";
  for (const auto& t : threads_of(pid))
    if (t.rfind(std::to_string(tid) + ":", 0) == 0) comm = t.substr(t.find(':') + 1);
  std::printf("@kit restore_thread=%s restore_tid=%d restore_thread_comm=%s\n", err_name(rt), tid,
              comm.c_str());

  CUcheckpointLockArgs lock{};
  lock.timeoutMs = 10000;
  auto t = Clock::now();
  CK(cuCheckpointProcessLock(pid, &lock));
  double lock_ms = ms_since(t);
  t = Clock::now();
  CK(cuCheckpointProcessCheckpoint(pid, nullptr));
  double ckpt_ms = ms_since(t);
  std::printf("@kit threads_checkpointed=%s\n", join(threads_of(pid)).c_str());
  usleep(200 * 1000);  // the lock holds for at least this long: the CUDA thread's gap shows it
  t = Clock::now();
  CK(cuCheckpointProcessRestore(pid, nullptr));
  double restore_ms = ms_since(t);
  t = Clock::now();
  CK(cuCheckpointProcessUnlock(pid, nullptr));
  double unlock_ms = ms_since(t);
  std::printf("@kit threads_after=%s\n", join(threads_of(pid)).c_str());
  std::printf("@kit lock_ms=%.2f checkpoint_ms=%.2f restore_ms=%.2f unlock_ms=%.2f\n", lock_ms,
              ckpt_ms, restore_ms, unlock_ms);
  write_line(to_child[1], "verify");
  std::string v = read_line(from_child[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (v.rfind("verified ", 0) != 0) {
    std::printf("@kit error=child_did_not_verify\n");
    return 1;
  }
  std::printf("@kit %s\n", v.substr(9).c_str());
  std::fflush(stdout);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
