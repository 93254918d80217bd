// A null CUDA driver for bench_interpose (interpose_overhead.cpp): a libcuda.so.1 whose every
// call returns CUDA_SUCCESS at once, doing nothing. Timing interpose_bench_probe on it directly
// and under gcr (GCR_REAL_LIBCUDA pointing here) isolates what the interposer's wrappers add,
// which simgpu's own per-call cost (a queue to a worker thread) would drown.
//
// It implements only what the probe and the interposer call on the measured paths: devices,
// contexts, a module whose two functions report the probe kernels' parameter layouts, VMM calls
// that hand out made-up addresses, and no-op launches and copies. Never a driver for anything else.
#include <cuda.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace {

struct NullFunction {
  const char* name;  // mangled, as cuFuncGetName answers
  int params;        // bench_args(unsigned*, int, unsigned): 3; bench_empty(): 0
};
NullFunction g_empty{"_Z11bench_emptyv", 0};
NullFunction g_args{"_Z10bench_argsPjij", 3};

std::atomic<unsigned long long> g_next_va{0x100000000000ull};
std::atomic<unsigned long long> g_next_handle{1};
int g_context_tag;

CUfunction as_function(NullFunction* f) {
  return reinterpret_cast<CUfunction>(f);
}
NullFunction* from_function(CUfunction f) {
  return reinterpret_cast<NullFunction*>(f);
}

}  // namespace

extern "C" {

#define NULL_API __attribute__((visibility("default")))

NULL_API CUresult cuInit(unsigned int) {
  return CUDA_SUCCESS;
}
NULL_API CUresult cuDriverGetVersion(int* v) {
  *v = CUDA_VERSION;
  return CUDA_SUCCESS;
}
NULL_API CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  *d = ordinal;
  return ordinal == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}
NULL_API CUresult cuDeviceGetCount(int* n) {
  *n = 1;
  return CUDA_SUCCESS;
}
NULL_API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice) {
  *bytes = 16ull << 30;
  return CUDA_SUCCESS;
}
NULL_API CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice) {
  *ctx = reinterpret_cast<CUcontext>(&g_context_tag);
  return CUDA_SUCCESS;
}
NULL_API CUresult cuCtxSetCurrent(CUcontext) {
  return CUDA_SUCCESS;
}
NULL_API CUresult cuCtxGetCurrent(CUcontext* ctx) {
  *ctx = reinterpret_cast<CUcontext>(&g_context_tag);
  return CUDA_SUCCESS;
}
NULL_API CUresult cuCtxGetDevice(CUdevice* d) {
  *d = 0;
  return CUDA_SUCCESS;
}
NULL_API CUresult cuCtxPushCurrent_v2(CUcontext) {
  return CUDA_SUCCESS;
}
NULL_API CUresult cuCtxPopCurrent_v2(CUcontext* ctx) {
  if (ctx) *ctx = reinterpret_cast<CUcontext>(&g_context_tag);
  return CUDA_SUCCESS;
}
NULL_API CUresult cuCtxSynchronize() {
  return CUDA_SUCCESS;
}

NULL_API CUresult cuModuleLoadData(CUmodule* m, const void*) {
  *m = reinterpret_cast<CUmodule>(&g_context_tag);
  return CUDA_SUCCESS;
}
NULL_API CUresult cuModuleUnload(CUmodule) {
  return CUDA_SUCCESS;
}
NULL_API CUresult cuModuleGetFunction(CUfunction* f, CUmodule, const char* name) {
  *f = as_function(std::strstr(name, "bench_args") ? &g_args : &g_empty);
  return CUDA_SUCCESS;
}
NULL_API CUresult cuFuncGetParamInfo(CUfunction f, size_t index, size_t* offset, size_t* size) {
  static const size_t kOffsets[] = {0, 8, 12}, kSizes[] = {8, 4, 4};
  if (static_cast<int>(index) >= from_function(f)->params) return CUDA_ERROR_INVALID_VALUE;
  *offset = kOffsets[index];
  *size = kSizes[index];
  return CUDA_SUCCESS;
}
NULL_API CUresult cuFuncGetName(const char** name, CUfunction f) {
  *name = from_function(f)->name;
  return CUDA_SUCCESS;
}

NULL_API CUresult cuStreamCreate(CUstream* s, unsigned int) {
  *s = reinterpret_cast<CUstream>(&g_context_tag);
  return CUDA_SUCCESS;
}
NULL_API CUresult cuStreamDestroy_v2(CUstream) {
  return CUDA_SUCCESS;
}
NULL_API CUresult cuStreamSynchronize(CUstream) {
  return CUDA_SUCCESS;
}
NULL_API CUresult cuStreamIsCapturing(CUstream, CUstreamCaptureStatus* st) {
  *st = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

NULL_API CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                 unsigned, unsigned, CUstream, void**, void**) {
  return CUDA_SUCCESS;
}
NULL_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr, const void*, size_t, CUstream) {
  return CUDA_SUCCESS;
}

// Memory: made-up device addresses (never dereferenced), real host memory for pinned buffers.
NULL_API CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
  *p = g_next_va.fetch_add((bytes + 0xfffff) & ~0xfffffull);
  return CUDA_SUCCESS;
}
NULL_API CUresult cuMemFree_v2(CUdeviceptr) {
  return CUDA_SUCCESS;
}
NULL_API CUresult cuMemAllocHost_v2(void** p, size_t bytes) {
  *p = std::malloc(bytes);
  return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
NULL_API CUresult cuMemFreeHost(void* p) {
  std::free(p);
  return CUDA_SUCCESS;
}
NULL_API CUresult cuMemAddressReserve(CUdeviceptr* p, size_t size, size_t, CUdeviceptr,
                                      unsigned long long) {
  *p = g_next_va.fetch_add((size + (2ull << 20) - 1) & ~((2ull << 20) - 1));
  return CUDA_SUCCESS;
}
NULL_API CUresult cuMemAddressFree(CUdeviceptr, size_t) {
  return CUDA_SUCCESS;
}
NULL_API CUresult cuMemCreate(CUmemGenericAllocationHandle* h, size_t, const CUmemAllocationProp*,
                              unsigned long long) {
  *h = g_next_handle.fetch_add(1);
  return CUDA_SUCCESS;
}
NULL_API CUresult cuMemRelease(CUmemGenericAllocationHandle) {
  return CUDA_SUCCESS;
}
NULL_API CUresult cuMemMap(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                           unsigned long long) {
  return CUDA_SUCCESS;
}
NULL_API CUresult cuMemUnmap(CUdeviceptr, size_t) {
  return CUDA_SUCCESS;
}
NULL_API CUresult cuMemSetAccess(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) {
  return CUDA_SUCCESS;
}

NULL_API CUresult cuGetErrorName(CUresult, const char** s) {
  *s = "CUDA_ERROR (null driver)";
  return CUDA_SUCCESS;
}
NULL_API CUresult cuGetErrorString(CUresult, const char** s) {
  *s = "error (null driver)";
  return CUDA_SUCCESS;
}

}  // extern "C"
