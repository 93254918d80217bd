// The driver checkpoint API (cuCheckpointProcess*), across processes, with the semantics of the
// real driver (research-cuda-checkpoint-criu.md §1): RUNNING -> Lock -> LOCKED -> Checkpoint ->
// CHECKPOINTED -> Restore -> LOCKED -> Unlock -> RUNNING; a lock blocks the target's CUDA calls;
// a checkpoint leaves the target holding no device memory but keeps its bytes; a restore puts
// them back at the same addresses, on the GPUs gpuPairs names.
//
// The target is this program in child mode "checkpoint-target" (child_modes.cpp).
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <future>
#include <sstream>

#include "common.h"

namespace fid {
namespace {

std::string proc_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The simgpu device-memory files (memfds) the process holds open or has mapped.
std::vector<std::string> device_memfds(pid_t pid) {
  std::vector<std::string> found;
  auto is_device = [](const std::string& s) {
    return s.find("memfd:simgpu-heap") != std::string::npos ||
           s.find("memfd:simgpu-dev") != std::string::npos;
  };
  std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      char target[512];
      ssize_t n = readlink((dir + "/" + e->d_name).c_str(), target, sizeof target - 1);
      if (n <= 0) continue;
      target[n] = 0;
      if (is_device(target)) found.push_back(std::string("fd ") + e->d_name + " -> " + target);
    }
    closedir(d);
  }
  std::istringstream maps(proc_text("/proc/" + std::to_string(pid) + "/maps"));
  for (std::string line; std::getline(maps, line);)
    if (is_device(line)) found.push_back("mapped: " + line);
  return found;
}

CUprocessState state_of(pid_t pid) {
  CUprocessState s = CU_PROCESS_STATE_FAILED;
  CU_OK(cuCheckpointProcessGetState(pid, &s));
  return s;
}

CUcheckpointGpuPair pair(int from, int to) {
  CUcheckpointGpuPair p{};
  CU_OK(cuDeviceGetUuid(&p.oldUuid, from));
  CU_OK(cuDeviceGetUuid(&p.newUuid, to));
  return p;
}

// A running checkpoint target, its device pointers as it reported them.
struct Target {
  Child child;
  std::string heap, vmm;
};

Target start_target() {
  use_device0();  // this process calls the API, so it initialises the driver too
  Target t{Child::mode({"checkpoint-target"}), {}, {}};
  std::optional<std::string> line = t.child.read_line();
  REQUIRE(line);
  INFO("target said: " << *line);
  std::vector<std::string> w = words(*line);
  REQUIRE(w.size() == 3);
  REQUIRE(w[0] == "ready");
  t.heap = w[1];
  t.vmm = w[2];
  return t;
}

struct Verified {
  bool heap_ok = false, vmm_ok = false, kernel_ok = false;
  int heap_device = -1, vmm_device = -1, context_device = -1;
  std::string heap_start, vmm_start;
  std::uint64_t device_bytes_used = 0;
  int gpu = -1;  // the simulated GPU behind the context's ordinal
};

Verified verify(Target& t) {
  t.child.send("verify");
  std::optional<std::string> line = t.child.read_line();
  REQUIRE(line);
  INFO("target said: " << *line);
  std::vector<std::string> w = words(*line);
  REQUIRE(w.size() == 11);
  REQUIRE(w[0] == "verify");
  return {w[1] == "1",     w[2] == "1", w[3] == "1", std::stoi(w[4]),   std::stoi(w[5]),
          std::stoi(w[6]), w[7],        w[8],        std::stoull(w[9]), std::stoi(w[10])};
}

// Note [Migration keeps ordinals] (simgpu): after a restore onto another GPU the process still
// sees its device as ordinal 0; the GPU behind that ordinal is the one restored onto.
void check_intact(Target& t, int gpu) {
  Verified v = verify(t);
  CHECK(v.heap_ok);
  CHECK(v.vmm_ok);
  CHECK(v.kernel_ok);
  CHECK(v.heap_start == t.heap);  // the same allocations, at the same addresses
  CHECK(v.vmm_start == t.vmm);
  CHECK(v.heap_device == 0);
  CHECK(v.vmm_device == 0);
  CHECK(v.context_device == 0);
  CHECK(v.gpu == gpu);
  CHECK(v.device_bytes_used >= (5u << 20));  // its 1 MiB + 4 MiB are charged to that device
}

void lock_and_checkpoint(pid_t pid) {
  CU_OK(cuCheckpointProcessLock(pid, nullptr));
  CHECK(state_of(pid) == CU_PROCESS_STATE_LOCKED);
  CU_OK(cuCheckpointProcessCheckpoint(pid, nullptr));
  CHECK(state_of(pid) == CU_PROCESS_STATE_CHECKPOINTED);
}

void finish(Target& t) {
  t.child.send("exit");
  CHECK(t.child.wait() == 0);
}

TEST_CASE("the restore thread of a CUDA process is its simgpu-ckpt thread", "[checkpoint]") {
  Target t = start_target();
  int tid = 0;
  CU_OK(cuCheckpointProcessGetRestoreThreadId(t.child.pid(), &tid));
  CHECK(tid > 0);
  CHECK(tid != t.child.pid());
  std::string comm = proc_text("/proc/" + std::to_string(t.child.pid()) + "/task/" +
                               std::to_string(tid) + "/comm");
  CHECK(comm == "simgpu-ckpt\n");
  CHECK(state_of(t.child.pid()) == CU_PROCESS_STATE_RUNNING);
  finish(t);
}

TEST_CASE("a lock blocks the target's CUDA calls until unlock", "[checkpoint]") {
  Target t = start_target();
  const pid_t pid = t.child.pid();
  CUcheckpointLockArgs args{};
  args.timeoutMs = 10000;
  CU_OK(cuCheckpointProcessLock(pid, &args));
  CHECK(state_of(pid) == CU_PROCESS_STATE_LOCKED);
  t.child.send("probe");
  CHECK_FALSE(t.child.read_line(300));  // the call is held by the lock
  CU_OK(cuCheckpointProcessUnlock(pid, nullptr));
  CHECK(state_of(pid) == CU_PROCESS_STATE_RUNNING);
  std::optional<std::string> answer = t.child.read_line();
  REQUIRE(answer);
  CHECK(*answer == "done CUDA_SUCCESS");
  finish(t);
}

TEST_CASE(
    "checkpoint releases the target's device memory and restore brings it back at the same "
    "addresses",
    "[checkpoint]") {
  Target t = start_target();
  const pid_t pid = t.child.pid();
  CHECK_FALSE(device_memfds(pid).empty());  // the check below would notice them
  check_intact(t, 0);

  lock_and_checkpoint(pid);
  std::vector<std::string> held = device_memfds(pid);
  INFO("device memory still held: " << [&] {
    std::string s;
    for (auto& h : held) s += h + "\n";
    return s;
  }());
  CHECK(held.empty());

  CU_OK(cuCheckpointProcessRestore(pid, nullptr));
  CHECK(state_of(pid) == CU_PROCESS_STATE_LOCKED);
  CHECK_FALSE(device_memfds(pid).empty());
  CU_OK(cuCheckpointProcessUnlock(pid, nullptr));
  CHECK(state_of(pid) == CU_PROCESS_STATE_RUNNING);
  check_intact(t, 0);

  SECTION("and again: a process can be checkpointed more than once") {
    lock_and_checkpoint(pid);
    CU_OK(cuCheckpointProcessRestore(pid, nullptr));
    CU_OK(cuCheckpointProcessUnlock(pid, nullptr));
    check_intact(t, 0);
  }
  finish(t);
}

TEST_CASE("a call made while the target is checkpointed completes after restore and unlock",
          "[checkpoint]") {
  Target t = start_target();
  const pid_t pid = t.child.pid();
  lock_and_checkpoint(pid);
  t.child.send("probe");
  CHECK_FALSE(t.child.read_line(300));
  CU_OK(cuCheckpointProcessRestore(pid, nullptr));
  CHECK_FALSE(t.child.read_line(100));  // restored, but still locked
  CU_OK(cuCheckpointProcessUnlock(pid, nullptr));
  std::optional<std::string> answer = t.child.read_line();
  REQUIRE(answer);
  CHECK(*answer == "done CUDA_SUCCESS");
  check_intact(t, 0);
  finish(t);
}

TEST_CASE(
    "restore with gpuPairs moves the target's memory and context to the GPU named, keeping its "
    "ordinals",
    "[checkpoint]") {
  Target t = start_target();
  const pid_t pid = t.child.pid();
  lock_and_checkpoint(pid);
  CUcheckpointGpuPair pairs[] = {pair(0, 1)};
  CUcheckpointRestoreArgs args{};
  args.gpuPairs = pairs;
  args.gpuPairsCount = 1;
  CU_OK(cuCheckpointProcessRestore(pid, &args));
  CHECK(state_of(pid) == CU_PROCESS_STATE_LOCKED);
  CU_OK(cuCheckpointProcessUnlock(pid, nullptr));
  check_intact(t, 1);
  finish(t);
}

TEST_CASE("restore with gpuPairs that miss a GPU the target uses fails and leaves it checkpointed",
          "[checkpoint]") {
  Target t = start_target();
  const pid_t pid = t.child.pid();
  lock_and_checkpoint(pid);
  CUcheckpointGpuPair pairs[] = {pair(1, 0)};  // the target uses device 0 only
  CUcheckpointRestoreArgs args{};
  args.gpuPairs = pairs;
  args.gpuPairsCount = 1;
  CHECK(cu(cuCheckpointProcessRestore(pid, &args)) == "CUDA_ERROR_INVALID_VALUE");
  CHECK(state_of(pid) == CU_PROCESS_STATE_CHECKPOINTED);
  CHECK(device_memfds(pid).empty());
  CU_OK(cuCheckpointProcessRestore(pid, nullptr));  // a correct restore still works
  CU_OK(cuCheckpointProcessUnlock(pid, nullptr));
  check_intact(t, 0);
  finish(t);
}

TEST_CASE("checkpoint API calls in the wrong state fail with CUDA_ERROR_ILLEGAL_STATE",
          "[checkpoint]") {
  Target t = start_target();
  const pid_t pid = t.child.pid();
  CHECK(cu(cuCheckpointProcessCheckpoint(pid, nullptr)) == "CUDA_ERROR_ILLEGAL_STATE");  // RUNNING
  CHECK(cu(cuCheckpointProcessUnlock(pid, nullptr)) == "CUDA_ERROR_ILLEGAL_STATE");
  CHECK(cu(cuCheckpointProcessRestore(pid, nullptr)) == "CUDA_ERROR_ILLEGAL_STATE");
  CHECK(state_of(pid) == CU_PROCESS_STATE_RUNNING);
  CU_OK(cuCheckpointProcessLock(pid, nullptr));
  CHECK(cu(cuCheckpointProcessLock(pid, nullptr)) == "CUDA_ERROR_ILLEGAL_STATE");  // LOCKED
  CHECK(cu(cuCheckpointProcessRestore(pid, nullptr)) == "CUDA_ERROR_ILLEGAL_STATE");
  CU_OK(cuCheckpointProcessCheckpoint(pid, nullptr));
  CHECK(cu(cuCheckpointProcessCheckpoint(pid, nullptr)) ==
        "CUDA_ERROR_ILLEGAL_STATE");  // CHECKPOINTED
  CHECK(cu(cuCheckpointProcessUnlock(pid, nullptr)) == "CUDA_ERROR_ILLEGAL_STATE");
  CHECK(cu(cuCheckpointProcessLock(pid, nullptr)) == "CUDA_ERROR_ILLEGAL_STATE");
  CHECK(state_of(pid) == CU_PROCESS_STATE_CHECKPOINTED);
  CU_OK(cuCheckpointProcessRestore(pid, nullptr));
  CU_OK(cuCheckpointProcessUnlock(pid, nullptr));
  check_intact(t, 0);
  finish(t);
}

TEST_CASE("checkpoint API arguments with nonzero reserved fields are refused", "[checkpoint]") {
  Target t = start_target();
  const pid_t pid = t.child.pid();
  CUcheckpointLockArgs lock{};
  lock.reserved0 = 1;
  CHECK(cu(cuCheckpointProcessLock(pid, &lock)) == "CUDA_ERROR_INVALID_VALUE");
  CHECK(state_of(pid) == CU_PROCESS_STATE_RUNNING);
  finish(t);
}

TEST_CASE("the checkpoint API refuses a process that does not use CUDA, and one that has exited",
          "[checkpoint]") {
  use_device0();
  Child sleeper = Child::program({"sleep", "30"});
  const pid_t pid = sleeper.pid();
  int tid = 0;
  CUprocessState state;
  CHECK(cu(cuCheckpointProcessGetRestoreThreadId(pid, &tid)) == "CUDA_ERROR_INVALID_VALUE");
  CHECK(cu(cuCheckpointProcessGetState(pid, &state)) == "CUDA_ERROR_INVALID_VALUE");
  CHECK(cu(cuCheckpointProcessLock(pid, nullptr)) == "CUDA_ERROR_INVALID_VALUE");

  sleeper.kill();
  sleeper.wait();  // gone: no such pid any more
  CHECK(cu(cuCheckpointProcessGetState(pid, &state)) != "CUDA_SUCCESS");
  CHECK(cu(cuCheckpointProcessGetRestoreThreadId(pid, &tid)) != "CUDA_SUCCESS");
  CHECK(cu(cuCheckpointProcessLock(pid, nullptr)) != "CUDA_SUCCESS");
}

TEST_CASE("a CUDA process that was killed (not yet reaped) is refused, not waited for",
          "[checkpoint]") {
  Target t = start_target();
  const pid_t pid = t.child.pid();
  t.child.kill();
  CHECK_FALSE(t.child.read_line());  // its stdout closes as it dies
  CUprocessState state;
  CHECK(cu(cuCheckpointProcessGetState(pid, &state)) != "CUDA_SUCCESS");
  CHECK(cu(cuCheckpointProcessLock(pid, nullptr)) != "CUDA_SUCCESS");
}

TEST_CASE(
    "a lock with a timeout on a target whose GPU stays busy gives up with CUDA_ERROR_NOT_READY, "
    "leaving it running",
    "[checkpoint]") {
  use_device0();
  Child busy = Child::mode({"busy-target"});
  std::optional<std::string> line = busy.read_line();
  REQUIRE(line);
  REQUIRE(*line == "ready");
  const pid_t pid = busy.pid();
  auto result = std::make_shared<std::string>();
  Background lock([pid, result] {
    CUcheckpointLockArgs args{};
    args.timeoutMs = 300;
    *result = cu(cuCheckpointProcessLock(pid, &args));
  });
  bool returned = lock.wait_for(10000);  // generous: the timeout is 300 ms
  if (!returned) {
    busy.kill();
    busy.wait();  // unblocks the call
  }
  REQUIRE(returned);
  CHECK(*result == "CUDA_ERROR_NOT_READY");
  CHECK(state_of(pid) == CU_PROCESS_STATE_RUNNING);
}

TEST_CASE("a checkpoint call whose target dies while it waits fails rather than hanging",
          "[checkpoint]") {
  use_device0();
  Child busy = Child::mode({"busy-target"});
  std::optional<std::string> line = busy.read_line();
  REQUIRE(line);
  REQUIRE(*line == "ready");
  const pid_t pid = busy.pid();
  // Lock waits for the work the target has queued: a kernel that runs for minutes.
  auto result = std::make_shared<std::string>();
  Background lock([pid, result] { *result = cu(cuCheckpointProcessLock(pid, nullptr)); });
  CHECK_FALSE(lock.wait_for(300));
  busy.kill();  // not reaped: the pid stays a zombie
  bool returned = lock.wait_for(10000);
  if (!returned) busy.wait();  // reaping makes the pid vanish, which unblocks the call
  CHECK(returned);
  CHECK(lock.wait_for(10000));
  CHECK(*result != "CUDA_SUCCESS");
}

}  // namespace
}  // namespace fid
