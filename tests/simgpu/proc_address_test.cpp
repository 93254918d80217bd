// cuGetProcAddress, error names and strings, and functions simgpu does not implement.
#include <dlfcn.h>

#include <cstring>

#include "common.h"

namespace fid {
namespace {

// The libcuda.so.1 this process runs on (simgpu's, through LD_LIBRARY_PATH).
void* libcuda() {
  static void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(handle != nullptr);
  return handle;
}

void* proc(const char* name, int version, cuuint64_t flags, CUdriverProcAddressQueryResult* status,
           CUresult* result) {
  void* fn = reinterpret_cast<void*>(1);
  *result = cuGetProcAddress(name, &fn, version, flags, status);
  return fn;
}

TEST_CASE("cuGetProcAddress answers a name by the version asked for", "[proc]") {
  use_device0();
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult r;
  void* fn = proc("cuMemAlloc", 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status, &r);
  CHECK(cu(r) == "CUDA_SUCCESS");
  CHECK(status == CU_GET_PROC_ADDRESS_SUCCESS);
  CHECK(fn == dlsym(libcuda(), "cuMemAlloc_v2"));

  fn = proc("cuMemAlloc", 2000, CU_GET_PROC_ADDRESS_DEFAULT, &status, &r);
  CHECK(cu(r) == "CUDA_SUCCESS");
  CHECK(fn == dlsym(libcuda(), "cuMemAlloc"));  // the original, 32-bit-era entry point
  CHECK(fn != dlsym(libcuda(), "cuMemAlloc_v2"));

  // What it returns is callable.
  auto alloc = reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t)>(
      proc("cuMemAlloc", 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status, &r));
  CUdeviceptr d = 0;
  CU_OK(alloc(&d, 4096));
  CU_OK(cuMemFree(d));
}

TEST_CASE("cuGetProcAddress with the per-thread flag gives the per-thread default stream variant",
          "[proc]") {
  use_device0();
  CUdriverProcAddressQueryResult status;
  CUresult r;
  void* fn =
      proc("cuMemcpyHtoDAsync", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status, &r);
  CHECK(cu(r) == "CUDA_SUCCESS");
  CHECK(fn == dlsym(libcuda(), "cuMemcpyHtoDAsync_v2_ptsz"));
  fn = proc("cuMemcpyHtoDAsync", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status, &r);
  CHECK(cu(r) == "CUDA_SUCCESS");
  CHECK(fn == dlsym(libcuda(), "cuMemcpyHtoDAsync_v2"));
}

TEST_CASE("cuGetProcAddress of an unknown name is CUDA_ERROR_NOT_FOUND, symbol not found",
          "[proc]") {
  use_device0();
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  CUresult r;
  void* fn = proc("cuNoSuchFunction", 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status, &r);
  CHECK(cu(r) == "CUDA_ERROR_NOT_FOUND");
  CHECK(status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  CHECK(fn == nullptr);
}

TEST_CASE("cuGetErrorName and cuGetErrorString name the driver's error codes", "[proc]") {
  const char* s = nullptr;
  CU_OK(cuGetErrorName(CUDA_SUCCESS, &s));
  CHECK(std::string(s) == "CUDA_SUCCESS");
  CU_OK(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
  CHECK(std::string(s) == "CUDA_ERROR_OUT_OF_MEMORY");
  CU_OK(cuGetErrorName(CUDA_ERROR_ILLEGAL_STATE, &s));
  CHECK(std::string(s) == "CUDA_ERROR_ILLEGAL_STATE");
  CU_OK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
  CHECK(std::string(s) == "out of memory");
  CU_OK(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s));
  CHECK(std::string(s) == "invalid argument");
  s = "untouched";
  CHECK(cu(cuGetErrorName(static_cast<CUresult>(123456), &s)) == "CUDA_ERROR_INVALID_VALUE");
  CHECK(s == nullptr);
}

TEST_CASE("a driver function simgpu does not implement returns CUDA_ERROR_NOT_SUPPORTED",
          "[proc]") {
  use_device0();
  CUgraph graph = nullptr;
  CHECK(cu(cuGraphCreate(&graph, 0)) == "CUDA_ERROR_NOT_SUPPORTED");
  CUdeviceptr d;
  CHECK(cu(cuMemAllocManaged(&d, 4096, CU_MEM_ATTACH_GLOBAL)) == "CUDA_ERROR_NOT_SUPPORTED");
}

}  // namespace
}  // namespace fid
