// What the interposer must not change (DESIGN.md §3 "Must not break"): programs that never use
// CUDA run as before and start nothing; a child forked from a CUDA process is left alone; the
// development name libcuda.so reaches the interposer too; and what gcr cannot checkpoint
// (managed memory) is refused with a message naming the call.
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>

#include "common.h"
#include "emulator.h"

namespace ipt {
namespace {

struct Run {
  std::string status;
  std::vector<std::string> out;
};

Run run(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  Child c = Child::program(argv, env);
  Run r;
  r.out = c.read_all(30000);
  r.status = describe_status(c.wait());
  return r;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (auto& l : lines) s += l + "\n";
  return s;
}

TEST_CASE("programs that never use CUDA exit the same under gcr", "[transparent]") {
  const std::vector<std::vector<std::string>> programs = {{"/bin/true"},
                                                          {"/bin/false"},
                                                          {"sh", "-c", "echo hi"},
                                                          {"sh", "-c", "exit 3"},
                                                          {"python3", "-c", "print(1)"}};
  for (const auto& argv : programs) {
    INFO(argv.back());
    Run plain = run(argv, {});
    Run gcr = run(argv, gcr_env());
    CHECK(gcr.status == plain.status);
    CHECK(gcr.out == plain.out);
  }
}

TEST_CASE(
    "a program that never uses CUDA loads the interposer but no driver and starts no gcr thread",
    "[transparent]") {
  if (gcr::test::kUnderEmulator) {
    WARN(
        "skipped under qemu-user: sh and python3 here are the host's, which cannot load an "
        "arm64 interposer");
    return;
  }
  // sh: its own fds, its thread count, whether the interposer and simgpu are mapped.
  const std::string probe =
      "echo hi; "
      "for f in /proc/$$/fd/*; do readlink $f; done; "
      "echo tasks $(ls /proc/$$/task | wc -l); "
      "grep -q '" +
      interposer_path() +
      "' /proc/$$/maps && echo interposer-mapped; "
      "grep -q '" +
      simgpu_path() +
      "' /proc/$$/maps && echo driver-mapped; "
      "exit 0";
  Run sh = run({"sh", "-c", probe}, gcr_env());
  INFO(joined(sh.out));
  CHECK(sh.status == "exit 0");
  REQUIRE_FALSE(sh.out.empty());
  CHECK(sh.out.front() == "hi");
  CHECK(std::find(sh.out.begin(), sh.out.end(), "interposer-mapped") != sh.out.end());
  CHECK(std::find(sh.out.begin(), sh.out.end(), "driver-mapped") == sh.out.end());
  CHECK(std::find(sh.out.begin(), sh.out.end(), "tasks 1") != sh.out.end());
  for (const auto& l : sh.out) CHECK(l.find("gcr-control") == std::string::npos);

  const std::string py =
      "import os\n"
      "print(1)\n"
      "links = []\n"
      "for f in os.listdir('/proc/self/fd'):\n"
      "    try: links.append(os.readlink('/proc/self/fd/' + f))\n"
      "    except OSError: pass\n"
      "print('gcr-control' if any('gcr-control' in l for l in links) else 'no-mailbox')\n"
      "print('tasks', len(os.listdir('/proc/self/task')))\n"
      "maps = open('/proc/self/maps').read()\n"
      "print('interposer-mapped' if '" +
      interposer_path() +
      "' in maps else 'interposer-absent')\n"
      "print('driver-mapped' if '" +
      simgpu_path() + "' in maps else 'driver-absent')\n";
  Run python = run({"python3", "-c", py}, gcr_env());
  INFO(joined(python.out));
  CHECK(python.status == "exit 0");
  CHECK(python.out == std::vector<std::string>{"1", "no-mailbox", "tasks 1", "interposer-mapped",
                                               "driver-absent"});
}

TEST_CASE("a child forked after cuInit is unmanaged: no mailbox, and its driver calls return",
          "[transparent]") {
  Child parent = Child::mode({"fork"}, gcr_env());
  std::vector<std::string> lines;
  auto ready = parent.read_until("ready", 30000, &lines);
  INFO(joined(lines));
  REQUIRE(ready);
  // The forked child's lines come from another process on the same pipe: wait for all of them.
  for (int i = 0; i < 100 && std::find(lines.begin(), lines.end(), "child done") == lines.end();
       ++i)
    if (auto more = parent.read_line(200)) lines.push_back(*more);
  auto has = [&](const std::string& l) {
    return std::find(lines.begin(), lines.end(), l) != lines.end();
  };
  CHECK(has("parent mailbox 1"));
  CHECK(has("parent compute ok"));
  CHECK(has("child mailbox 0"));
  CHECK(has("child done"));  // its driver calls returned (a hang would end it by alarm, silently)
  pid_t child_pid = 0;
  for (const auto& l : lines)
    if (l.rfind("child pid ", 0) == 0) child_pid = static_cast<pid_t>(std::stol(l.substr(10)));
  REQUIRE(child_pid > 0);
  for (const auto& l : lines)
    if (l.rfind("child cuDeviceGetCount", 0) == 0 || l.rfind("child cuMemAlloc_v2", 0) == 0)
      std::printf("fork: %s\n", l.c_str());

  // gcr finds no control channel in the child, and the parent is still managed.
  auto refused = control::Client::connect(child_pid, std::chrono::seconds(2));
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == gcr::Errc::not_found);
  control::Client client = connect(parent.pid());
  REQUIRE(client.status());
  REQUIRE(client.close());
  parent.send("exit");
  CHECK(describe_status(parent.wait()) == "exit 0");
}

TEST_CASE("managed memory is refused with CUDA_ERROR_NOT_SUPPORTED and a message naming the call",
          "[transparent]") {
  require_under_gcr();
  use_device(0);
  // Catch what the interposer writes to stderr.
  int saved = dup(2);
  int capture = memfd_create("stderr-capture", MFD_CLOEXEC);
  REQUIRE((saved >= 0 && capture >= 0));
  dup2(capture, 2);
  CUdeviceptr d = 0;
  CUresult r = cuMemAllocManaged(&d, 4096, CU_MEM_ATTACH_GLOBAL);
  dup2(saved, 2);
  close(saved);
  char buf[1024] = {};
  ssize_t n = pread(capture, buf, sizeof buf - 1, 0);
  close(capture);
  std::string message(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
  INFO("stderr: " << message);
  CHECK(cu(r) == "CUDA_ERROR_NOT_SUPPORTED");
  CHECK(message.find("cuMemAllocManaged") != std::string::npos);
  CHECK(message.find("gcr") != std::string::npos);
}

TEST_CASE("dlopen of libcuda.so or libcuda.so.1 inside a process under gcr returns the interposer",
          "[transparent]") {
  require_under_gcr();
  char want[PATH_MAX];
  REQUIRE(realpath(interposer_path().c_str(), want) != nullptr);
  for (const std::string& name :
       std::vector<std::string>{"libcuda.so", "libcuda.so.1", simgpu_path()}) {
    INFO("dlopen(\"" << name << "\")");
    void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    REQUIRE(h != nullptr);
    void* init = dlsym(h, "cuInit");
    REQUIRE(init != nullptr);
    Dl_info info{};
    REQUIRE(dladdr(init, &info) != 0);
    char got[PATH_MAX];
    REQUIRE(realpath(info.dli_fname, got) != nullptr);
    CHECK(std::string(got) == std::string(want));
    CHECK(init == reinterpret_cast<void*>(&cuInit));
    dlclose(h);
  }
}

}  // namespace
}  // namespace ipt
