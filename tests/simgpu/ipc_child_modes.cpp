// Child modes for the interprocess tests (ipc_test.cpp, shared_checkpoint_test.cpp): the other
// process of CUDA IPC memory and events, stream memory operations and kernels that spin on a
// flag another process sets. Handles travel as hex on the command line.
#include <iostream>
#include <string>
#include <vector>

#include "child_support.h"
#include "common.h"
#include "fidelity_kernels_fatbin.h"
#include "ipc_layout.h"

namespace fid {
namespace {

namespace names = embedded::fidelity_kernels::kernel;

std::string next_command() {
  std::string line;
  return std::getline(std::cin, line) ? line : "eof";
}

std::string check_words(CUdeviceptr d, std::size_t n,
                        std::uint32_t (*expected)(std::uint32_t, std::size_t), std::uint32_t seed,
                        CUstream s) {
  std::vector<std::uint32_t> got(n);
  CHILD_CHECK(cuMemcpyDtoHAsync(got.data(), d, n * 4, s));
  CHILD_CHECK(cuStreamSynchronize(s));
  for (std::size_t i = 0; i < n; ++i)
    if (got[i] != expected(seed, i)) return "mismatch-at " + std::to_string(i);
  return "ok";
}

// Opens a CUipcMemHandle of the test's, checks the test's pattern, writes its own; opens it
// again (the same pointer must come back). Then serves: close (answers "close <CUresult>"), exit.
int mode_ipc_open(const std::string& handle_hex, std::size_t words, std::uint32_t seen_seed,
                  std::uint32_t write_seed) {
  init_device0();
  CUipcMemHandle h;
  if (!unhex(handle_hex, &h, sizeof h)) return 2;
  CUdeviceptr d = 0, again = 0;
  CHILD_CHECK(cuIpcOpenMemHandle(&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  say("seen " + check_words(d, words, pattern, seen_seed, nullptr));
  std::vector<std::uint32_t> mine = pattern_words(write_seed, words);
  CHILD_CHECK(cuMemcpyHtoD(d, mine.data(), words * 4));
  CHILD_CHECK(cuIpcOpenMemHandle(&again, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  say(std::string("reopen ") + (again == d ? "same" : "different"));
  int legacy = -1;
  CHILD_CHECK(cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, d));
  say("written");
  for (std::string cmd = next_command(); cmd != "exit" && cmd != "eof"; cmd = next_command()) {
    if (cmd == "close")
      say("close " + cu(cuIpcCloseMemHandle(d)));
    else
      say("unknown-command " + cmd);
  }
  return 0;
}

// Exports a cuMemAlloc allocation holding pattern `seed`: says "handle <hex>". Then serves:
// verify <seed> (answers "verify ok" if the allocation now holds that pattern), exit.
int mode_ipc_export(std::size_t n, std::uint32_t seed) {
  init_device0();
  CUdeviceptr d;
  CHILD_CHECK(cuMemAlloc(&d, n * 4));
  std::vector<std::uint32_t> mine = pattern_words(seed, n);
  CHILD_CHECK(cuMemcpyHtoD(d, mine.data(), n * 4));
  CUipcMemHandle h;
  CHILD_CHECK(cuIpcGetMemHandle(&h, d));
  say("handle " + hex(&h, sizeof h));
  for (std::string cmd = next_command(); cmd != "exit" && cmd != "eof"; cmd = next_command()) {
    auto w = words(cmd);
    if (w.size() == 2 && w[0] == "verify")
      say("verify " +
          check_words(d, n, pattern, static_cast<std::uint32_t>(std::stoul(w[1])), nullptr));
    else
      say("unknown-command " + cmd);
  }
  return 0;
}

// Makes an exportable VMM allocation holding pattern `seed`, mapped here, and exports it: says
// "fd <n>" (the test opens /proc/<pid>/fd/<n>). Then waits for exit.
int mode_vmm_export(std::size_t size, std::uint32_t seed) {
  init_device0();
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle h;
  CHILD_CHECK(cuMemCreate(&h, size, &prop, 0));
  CUdeviceptr d;
  CHILD_CHECK(cuMemAddressReserve(&d, size, 0, 0, 0));
  CHILD_CHECK(cuMemMap(d, size, 0, h, 0));
  CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CHILD_CHECK(cuMemSetAccess(d, size, &access, 1));
  std::vector<std::uint32_t> mine = pattern_words(seed, size / 4);
  CHILD_CHECK(cuMemcpyHtoD(d, mine.data(), size));
  int fd = -1;
  CHILD_CHECK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  say("fd " + std::to_string(fd));
  next_command();
  return 0;
}

// The peer of the test's shared buffer (ipc_layout.h) and interprocess event; each step on the
// test's command:
//   event    query the event ("query <r>"), wait for it on a stream and read the data
//            ("event-seen ok"), then cuEventSynchronize and query again ("query-after <r>")
//   kernel   a kernel spins until the test's kernel releases flag32 >= 1, then copies the data
//            ("spinning", then "kernel-seen ok")
//   memop    cuStreamWaitValue64(flag64 >= 5) then a copy of the data ("waiting", "memop-seen ok")
//   publish  writes pattern kPublishSeed to the data, then cuStreamWriteValue32(flag32 = 2)
int mode_ipc_peer(const std::string& mem_hex, const std::string& event_hex) {
  init_device0();
  CUipcMemHandle mh;
  CUipcEventHandle eh;
  if (!unhex(mem_hex, &mh, sizeof mh) || !unhex(event_hex, &eh, sizeof eh)) return 2;
  CUdeviceptr base;
  CHILD_CHECK(cuIpcOpenMemHandle(&base, mh, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  CUevent ev;
  CHILD_CHECK(cuIpcOpenEventHandle(&ev, eh));
  CUstream s;
  CHILD_CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUmodule module;
  CHILD_CHECK(cuModuleLoadData(&module, embedded::fidelity_kernels::fatbin.data));
  CUfunction wait_copy;
  CHILD_CHECK(cuModuleGetFunction(&wait_copy, module, names::fid_wait_copy));
  CUdeviceptr out;
  CHILD_CHECK(cuMemAlloc(&out, ipc_layout::kWords * 4));
  const CUdeviceptr flag32 = base + ipc_layout::kFlag32, flag64 = base + ipc_layout::kFlag64,
                    data = base + ipc_layout::kData;
  say("opened");
  for (std::string cmd = next_command(); cmd != "exit" && cmd != "eof"; cmd = next_command()) {
    if (cmd == "event") {
      say("query " + cu(cuEventQuery(ev)));
      CHILD_CHECK(cuStreamWaitEvent(s, ev, 0));
      say("event-seen " +
          check_words(data, ipc_layout::kWords, pattern, ipc_layout::kEventSeed, s));
      CHILD_CHECK(cuEventSynchronize(ev));
      say("query-after " + cu(cuEventQuery(ev)));
    } else if (cmd == "kernel") {
      unsigned value = 1;
      int n = static_cast<int>(ipc_layout::kWords);
      CUdeviceptr flag = flag32;
      void* params[] = {&flag, &value, const_cast<CUdeviceptr*>(&data), &out, &n};
      CHILD_CHECK(cuLaunchKernel(wait_copy, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr));
      say("spinning");
      say("kernel-seen " +
          check_words(out, ipc_layout::kWords, published, ipc_layout::kKernelSeed, s));
    } else if (cmd == "memop") {
      CHILD_CHECK(cuStreamWaitValue64(s, flag64, 5, CU_STREAM_WAIT_VALUE_GEQ));
      say("waiting");
      say("memop-seen " +
          check_words(data, ipc_layout::kWords, pattern, ipc_layout::kMemopSeed, s));
    } else if (cmd == "publish") {
      std::vector<std::uint32_t> mine = pattern_words(ipc_layout::kPublishSeed, ipc_layout::kWords);
      CHILD_CHECK(cuMemcpyHtoDAsync(data, mine.data(), ipc_layout::kWords * 4, s));
      CHILD_CHECK(cuStreamWriteValue32(s, flag32, 2, CU_STREAM_WRITE_VALUE_DEFAULT));
      CHILD_CHECK(cuStreamSynchronize(s));
      say("published");
    } else {
      say("unknown-command " + cmd);
    }
  }
  CHILD_CHECK(cuEventDestroy(ev));
  CHILD_CHECK(cuIpcCloseMemHandle(base));
  return 0;
}

}  // namespace

int run_ipc_child_mode(int argc, char** argv) {
  std::string mode = argv[0];
  if (mode == "ipc-open" && argc == 5)
    return mode_ipc_open(argv[1], std::strtoull(argv[2], nullptr, 0),
                         static_cast<std::uint32_t>(std::atoi(argv[3])),
                         static_cast<std::uint32_t>(std::atoi(argv[4])));
  if (mode == "ipc-export" && argc == 3)
    return mode_ipc_export(std::strtoull(argv[1], nullptr, 0),
                           static_cast<std::uint32_t>(std::atoi(argv[2])));
  if (mode == "vmm-export" && argc == 3)
    return mode_vmm_export(std::strtoull(argv[1], nullptr, 0),
                           static_cast<std::uint32_t>(std::atoi(argv[2])));
  if (mode == "ipc-peer" && argc == 3) return mode_ipc_peer(argv[1], argv[2]);
  return -1;
}

}  // namespace fid
