#include "fork_probe.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <vector>

#include "workload_util.h"

namespace dw {
namespace {

constexpr unsigned kChildTimeoutS = 10;  // a call that takes longer counts as a hang

// Writes straight to fd 1: stdio buffers inherited across fork must not be flushed twice.
void say(const char* text) {
  std::size_t n = std::strlen(text);
  while (n > 0) {
    ssize_t w = write(STDOUT_FILENO, text, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    text += w;
    n -= static_cast<std::size_t>(w);
  }
}

// Prints "child: CALL -> NAME (code)"; the call's name goes out before the call, so that a hang
// shows which call it was. True if the result is CUDA_ERROR_NOT_INITIALIZED.
template <typename Call>
bool check_call(const char* name, Call call) {
  char line[256];
  std::snprintf(line, sizeof line, "child: %s -> ", name);
  say(line);
  CUresult r = call();
  const char* error = nullptr;
  if (cuGetErrorName(r, &error) != CUDA_SUCCESS || !error) error = wl::builtin_error_name(r);
  std::snprintf(line, sizeof line, "%s (%d)\n", r == CUDA_SUCCESS ? "CUDA_SUCCESS" : error,
                static_cast<int>(r));
  say(line);
  return r == CUDA_ERROR_NOT_INITIALIZED;
}

[[noreturn]] void child_main(CUdeviceptr buffer) {
  alarm(kChildTimeoutS);
  bool ok = true;
  // In the order a DataLoader worker would stumble into them: work on the parent's context,
  // then an attempt to start over.
  ok &= check_call("cuCtxSynchronize", [] { return cuCtxSynchronize(); });
  ok &= check_call("cuMemAlloc", [] {
    CUdeviceptr p = 0;
    return cuMemAlloc(&p, 4096);
  });
  ok &= check_call("cuMemcpyDtoH", [buffer] {
    unsigned char host[4];
    return cuMemcpyDtoH(host, buffer, sizeof host);
  });
  ok &= check_call("cuInit", [] { return cuInit(0); });
  ok &= check_call("cuDeviceGet", [] {
    CUdevice d = 0;
    return cuDeviceGet(&d, 0);
  });
  _exit(ok ? 0 : 1);
}

}  // namespace

int probe_child_cuda(CUdeviceptr buffer, unsigned bytes, unsigned char fill) {
  std::fflush(nullptr);
  pid_t child = fork();
  if (child < 0) {
    std::perror("data_workers: fork");
    return 2;
  }
  if (child == 0) child_main(buffer);

  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) {
      std::perror("data_workers: waitpid");
      return 2;
    }
  }
  int rc = 0;
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) {
    std::printf(
        "\nchild_cuda: HUNG (no answer within %u s; the last 'child:' line names the call)\n",
        kChildTimeoutS);
    rc = 1;
  } else if (WIFSIGNALED(status)) {
    std::printf("child_cuda: child killed by signal %d (%s)\n", WTERMSIG(status),
                strsignal(WTERMSIG(status)));
    rc = 1;
  } else if (WEXITSTATUS(status) != 0) {
    std::printf("child_cuda: WRONG (a call did not fail with CUDA_ERROR_NOT_INITIALIZED)\n");
    rc = 1;
  } else {
    std::printf("child_cuda: refused (every call failed with CUDA_ERROR_NOT_INITIALIZED)\n");
  }

  // The parent's context must not have suffered from whatever the child did.
  std::vector<unsigned char> host(bytes);
  CU_CHECK(cuCtxSynchronize());
  CU_CHECK(cuMemcpyDtoH(host.data(), buffer, bytes));
  bool intact = true;
  for (unsigned char b : host) intact &= b == fill;
  std::printf("parent_cuda: %s\n", intact ? "intact" : "BROKEN (device buffer changed)");
  return intact ? rc : 1;
}

}  // namespace dw
