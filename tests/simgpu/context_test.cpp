// Contexts: primary contexts, created contexts and each thread's stack of current contexts.
#include <thread>

#include "common.h"

namespace fid {
namespace {

struct PrimaryState {
  unsigned flags = 0;
  int active = -1;
};
PrimaryState primary_state(CUdevice dev) {
  PrimaryState s;
  CU_OK(cuDevicePrimaryCtxGetState(dev, &s.flags, &s.active));
  return s;
}

TEST_CASE("a primary context is one per device, counted by retain and release", "[context]") {
  use_device0();
  const int before = primary_state(1).active;
  CUcontext a = nullptr, b = nullptr;
  CU_OK(cuDevicePrimaryCtxRetain(&a, 1));
  CHECK(primary_state(1).active == 1);
  CU_OK(cuDevicePrimaryCtxRetain(&b, 1));
  CHECK(a == b);
  CHECK(a != primary_context(0));
  CUdevice dev = -1;
  CU_OK(cuCtxGetDevice_v2(&dev, a));
  CHECK(dev == 1);
  CU_OK(cuDevicePrimaryCtxRelease(1));
  CHECK(primary_state(1).active == 1);  // one reference left
  CU_OK(cuDevicePrimaryCtxRelease(1));
  CHECK(primary_state(1).active == before);
  if (!before) CHECK(cu(cuDevicePrimaryCtxRelease(1)) == "CUDA_ERROR_INVALID_CONTEXT");
}

TEST_CASE("a new thread has no current context, and calls that need one fail", "[context]") {
  use_device0();
  std::string current, get_device, alloc;
  CUcontext seen = reinterpret_cast<CUcontext>(1);
  std::thread([&] {
    current = cu(cuCtxGetCurrent(&seen));
    CUdevice dev;
    get_device = cu(cuCtxGetDevice(&dev));
    CUdeviceptr d;
    alloc = cu(cuMemAlloc(&d, 4096));
  }).join();
  CHECK(current == "CUDA_SUCCESS");
  CHECK(seen == nullptr);
  CHECK(get_device == "CUDA_ERROR_INVALID_CONTEXT");
  CHECK(alloc == "CUDA_ERROR_INVALID_CONTEXT");
}

TEST_CASE("push and pop move through the thread's context stack", "[context]") {
  use_device0();
  CUcontext p0 = primary_context(0);
  CUcontext created = nullptr;
  CU_OK(cuCtxCreate(&created, nullptr, 0, 1));  // made current
  CUcontext current = nullptr;
  CU_OK(cuCtxGetCurrent(&current));
  CHECK(current == created);
  CUdevice dev = -1;
  CU_OK(cuCtxGetDevice(&dev));
  CHECK(dev == 1);

  CU_OK(cuCtxPushCurrent(p0));
  CU_OK(cuCtxGetDevice(&dev));
  CHECK(dev == 0);
  CUcontext popped = nullptr;
  CU_OK(cuCtxPopCurrent(&popped));
  CHECK(popped == p0);
  CU_OK(cuCtxGetCurrent(&current));
  CHECK(current == created);
  CU_OK(cuCtxPopCurrent(&popped));
  CHECK(popped == created);
  CU_OK(cuCtxGetCurrent(&current));
  CHECK(current == p0);  // what use_device0 made current, below

  CU_OK(cuCtxSetCurrent(created));  // replaces the top
  CU_OK(cuCtxGetCurrent(&current));
  CHECK(current == created);
  CU_OK(cuCtxDestroy(created));
  CHECK(cu(cuCtxPushCurrent(created)) == "CUDA_ERROR_INVALID_CONTEXT");
  CHECK(cu(cuCtxGetDevice_v2(&dev, created)) == "CUDA_ERROR_INVALID_CONTEXT");
}

TEST_CASE("contexts have distinct ids and an API version", "[context]") {
  use_device0();
  CUcontext created = nullptr;
  CU_OK(cuCtxCreate(&created, nullptr, 0, 0));
  unsigned long long id0 = 0, id1 = 0;
  CU_OK(cuCtxGetId(primary_context(0), &id0));
  CU_OK(cuCtxGetId(created, &id1));
  CHECK(id0 != id1);
  unsigned version = 0;
  CU_OK(cuCtxGetApiVersion(created, &version));
  CHECK(version >= 3020);
  CU_OK(cuCtxDestroy(created));
  use_device0();
}

TEST_CASE("memory belongs to the device of the context that allocates it, and dies with it",
          "[context]") {
  use_device0();
  CUcontext c1 = nullptr;
  CU_OK(cuCtxCreate(&c1, nullptr, 0, 1));
  size_t free_before = 0, total = 0;
  CU_OK(cuMemGetInfo(&free_before, &total));
  CUdeviceptr d;
  CU_OK(cuMemAlloc(&d, 64 << 20));
  int ordinal = -1;
  CU_OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d));
  CHECK(ordinal == 1);
  CUcontext owner = nullptr;
  CU_OK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, d));
  CHECK(owner == c1);
  size_t free_after = 0;
  CU_OK(cuMemGetInfo(&free_after, &total));
  CHECK(free_before - free_after >= (64u << 20));
  CU_OK(cuCtxDestroy(c1));

  CUcontext c2 = nullptr;
  CU_OK(cuCtxCreate(&c2, nullptr, 0, 1));
  size_t free_again = 0;
  CU_OK(cuMemGetInfo(&free_again, &total));
  CHECK(free_again == free_before);
  CU_OK(cuCtxDestroy(c2));
  use_device0();
}

TEST_CASE("cuCtxSynchronize waits for the work of every stream of the context", "[context]") {
  use_device0();
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  StreamLatch latch;
  CU_OK(latch.hold(s));
  std::string result;
  {
    Background sync([&] {
      cuCtxSetCurrent(primary_context(0));
      result = cu(cuCtxSynchronize());
    });
    CHECK_FALSE(sync.wait_for(300));
    latch.open();
    CHECK(sync.wait_for(10000));
  }
  CHECK(result == "CUDA_SUCCESS");
  CU_OK(cuStreamDestroy(s));
}

}  // namespace
}  // namespace fid
