// What child modes (child_modes.cpp, ipc_child_modes.cpp) share: one line per message to the
// test, a failed CUDA call reported as "error <call> <CUresult name>" with exit status 3.
#pragma once

#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common.h"

namespace fid {

inline void say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

#define CHILD_CHECK(call)                                      \
  do {                                                         \
    CUresult child_r_ = (call);                                \
    if (child_r_ != CUDA_SUCCESS) {                            \
      say(std::string("error ") + #call + " " + cu(child_r_)); \
      std::exit(3);                                            \
    }                                                          \
  } while (0)

inline std::string ptr_hex(CUdeviceptr d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(d));
  return buf;
}

// A context on device 0 of this (child) process.
inline CUcontext init_device0() {
  CHILD_CHECK(cuInit(0));
  CUdevice dev;
  CHILD_CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHILD_CHECK(cuCtxCreate(&ctx, nullptr, 0, dev));
  return ctx;
}

// The IPC child modes (ipc_child_modes.cpp); -1 if argv names none of them.
int run_ipc_child_mode(int argc, char** argv);

}  // namespace fid
