// The driver checkpoint of a process whose device memory is shared with another process: refused
// with CUDA_ERROR_NOT_SUPPORTED, as drivers before 610 refuse it, leaving the process LOCKED and
// whole; once nothing is shared any more the same process checkpoints and restores.
#include <fcntl.h>
#include <unistd.h>

#include "common.h"

namespace fid {
namespace {

CUprocessState state_of(pid_t pid) {
  CUprocessState s = CU_PROCESS_STATE_FAILED;
  CU_OK(cuCheckpointProcessGetState(pid, &s));
  return s;
}

std::string expect(Child& c, const std::string& key) {
  while (auto line = c.read_line(20000)) {
    if (line->rfind(key + " ", 0) == 0) return line->substr(key.size() + 1);
    if (*line == key) return key;
    if (line->rfind("error", 0) == 0) break;
  }
  FAIL_CHECK("child did not say " << key);
  return "";
}

// Lock, a refused checkpoint, unlock: the process runs on as before.
void check_refused(pid_t pid) {
  CU_OK(cuCheckpointProcessLock(pid, nullptr));
  CHECK(cu(cuCheckpointProcessCheckpoint(pid, nullptr)) == "CUDA_ERROR_NOT_SUPPORTED");
  CHECK(state_of(pid) == CU_PROCESS_STATE_LOCKED);
  CU_OK(cuCheckpointProcessUnlock(pid, nullptr));
  CHECK(state_of(pid) == CU_PROCESS_STATE_RUNNING);
}

void checkpoint_and_restore(pid_t pid) {
  CU_OK(cuCheckpointProcessLock(pid, nullptr));
  CU_OK(cuCheckpointProcessCheckpoint(pid, nullptr));
  CHECK(state_of(pid) == CU_PROCESS_STATE_CHECKPOINTED);
  CU_OK(cuCheckpointProcessRestore(pid, nullptr));
  CU_OK(cuCheckpointProcessUnlock(pid, nullptr));
}

TEST_CASE("the driver checkpoint refuses a process with IPC memory open, until it closes it",
          "[checkpoint]") {
  use_device0();
  const std::size_t words = 1024;
  DeviceBuffer d(words * 4);
  write_u32(d.get(), pattern_words(61, words));
  CUipcMemHandle h;
  CU_OK(cuIpcGetMemHandle(&h, d.get()));
  Child child = Child::mode({"ipc-open", hex(&h, sizeof h), std::to_string(words), "61", "62"});
  REQUIRE(expect(child, "written") == "written");
  check_refused(child.pid());
  CHECK(read_u32(d.get(), words) == pattern_words(62, words));  // still shared
  child.send("close");
  CHECK(expect(child, "close") == "CUDA_SUCCESS");
  child.send("close");
  CHECK(expect(child, "close") == "CUDA_SUCCESS");
  checkpoint_and_restore(child.pid());
  child.send("exit");
  CHECK(child.wait() == 0);
}

TEST_CASE(
    "the driver checkpoint refuses an exporter while another process maps its IPC memory, and "
    "takes it afterwards",
    "[checkpoint]") {
  use_device0();
  const std::size_t words = 1024;
  Child exporter = Child::mode({"ipc-export", std::to_string(words), "71"});
  std::string text = expect(exporter, "handle");
  CUipcMemHandle h;
  REQUIRE(unhex(text, &h, sizeof h));
  CUdeviceptr p = 0;
  CU_OK(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  CHECK(read_u32(p, words) == pattern_words(71, words));
  write_u32(p, pattern_words(72, words));
  check_refused(exporter.pid());
  CU_OK(cuIpcCloseMemHandle(p));
  checkpoint_and_restore(exporter.pid());
  exporter.send("verify 72");
  CHECK(expect(exporter, "verify") == "ok");
  exporter.send("exit");
  CHECK(exporter.wait() == 0);
}

TEST_CASE("the driver checkpoint refuses a process that maps an imported VMM allocation",
          "[checkpoint]") {
  use_device0();
  const std::size_t size = 2 << 20;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle handle;
  CU_OK(cuMemCreate(&handle, size, &prop, 0));
  CUdeviceptr d;
  CU_OK(cuMemAddressReserve(&d, size, 0, 0, 0));
  CU_OK(cuMemMap(d, size, 0, handle, 0));
  CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CU_OK(cuMemSetAccess(d, size, &access, 1));
  write_u32(d, pattern_words(81, size / 4));
  int fd = -1;
  CU_OK(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  REQUIRE(fcntl(fd, F_SETFD, 0) == 0);
  Child child = Child::mode({"vmm-import", std::to_string(fd), std::to_string(size), "81", "82"});
  close(fd);
  REQUIRE(expect(child, "written") == "written");
  check_refused(child.pid());
  CHECK(read_u32(d, size / 4) == pattern_words(82, size / 4));
  child.send("exit");
  CHECK(child.wait() == 0);
  CU_OK(cuMemUnmap(d, size));
  CU_OK(cuMemAddressFree(d, size));
  CU_OK(cuMemRelease(handle));
}

TEST_CASE(
    "the driver checkpoint refuses a process whose exported VMM allocation another process maps, "
    "and takes it once unmapped",
    "[checkpoint]") {
  use_device0();
  const std::size_t size = 2 << 20;
  Child exporter = Child::mode({"vmm-export", std::to_string(size), "91"});
  std::string fd_number = expect(exporter, "fd");
  REQUIRE(!fd_number.empty());
  // The fd the way PyTorch takes it (pidfd_getfd): from the exporter's descriptor table.
  std::string path = "/proc/" + std::to_string(exporter.pid()) + "/fd/" + fd_number;
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  CUmemGenericAllocationHandle h;
  CU_OK(cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)),
                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  close(fd);
  CUdeviceptr d;
  CU_OK(cuMemAddressReserve(&d, size, 0, 0, 0));
  CU_OK(cuMemMap(d, size, 0, h, 0));
  CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CU_OK(cuMemSetAccess(d, size, &access, 1));
  CHECK(read_u32(d, size / 4) == pattern_words(91, size / 4));
  check_refused(exporter.pid());
  CU_OK(cuMemUnmap(d, size));
  CU_OK(cuMemAddressFree(d, size));
  CU_OK(cuMemRelease(h));
  checkpoint_and_restore(exporter.pid());
  exporter.send("exit");
  CHECK(exporter.wait() == 0);
}

}  // namespace
}  // namespace fid
