// The real CUDA driver behind the interposer: found by absolute path, never this library itself,
// loaded at the first CUDA call (never from a constructor or from dlsym), and the typed entry
// points of every function the interposer wraps.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

namespace gcr::interpose {

// The functions the interposer wraps, each with the real driver's entry point. X(name) lines.
// The functions the interposer calls itself, each with the real driver's entry point:
// X(name) for names cuda.h declares, XT(name, declared) for per-thread variants, which cuda.h
// declares only under CUDA_API_PER_THREAD_DEFAULT_STREAM but which share `declared`'s type.
#define GCR_WRAPPED_FUNCTIONS(X, XT)                                                               \
  X(cuInit)                                                                                        \
  X(cuGetProcAddress_v2)                                                                           \
  X(cuDevicePrimaryCtxRetain)                                                                      \
  X(cuCtxCreate_v4)                                                                                \
  X(cuCtxDestroy_v2)                                                                               \
  X(cuCtxPushCurrent_v2)                                                                           \
  X(cuCtxPopCurrent_v2)                                                                            \
  X(cuCtxSynchronize)                                                                              \
  X(cuCtxGetCurrent)                                                                               \
  X(cuCtxSetCurrent)                                                                               \
  X(cuCtxGetDevice) X(cuDeviceGetCount) X(cuDeviceTotalMem_v2) X(cuMemAlloc_v2)                    \
      X(cuMemAllocPitch_v2) X(cuMemFree_v2) X(cuMemAllocAsync) XT(                                 \
          cuMemAllocAsync_ptsz, cuMemAllocAsync) X(cuMemAllocFromPoolAsync)                        \
          XT(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync) X(cuMemFreeAsync) XT(          \
              cuMemFreeAsync_ptsz, cuMemFreeAsync) X(cuMemGetAddressRange_v2)                      \
              X(cuPointerGetAttribute) X(cuPointerGetAttributes) X(cuStreamIsCapturing) XT(        \
                  cuStreamIsCapturing_ptsz, cuStreamIsCapturing) X(cuEventCreate) X(cuEventRecord) \
                  XT(cuEventRecord_ptsz, cuEventRecord) X(cuEventQuery) X(cuEventDestroy_v2) X(    \
                      cuMemAddressReserve) X(cuMemAddressFree) X(cuMemCreate) X(cuMemRelease)      \
                      X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess) X(cuMemExportToShareableHandle)  \
                          X(cuMemImportFromShareableHandle) X(cuMemRetainAllocationHandle)         \
                              X(cuMemGetAllocationGranularity) X(cuFuncGetParamInfo)               \
                                  X(cuFuncGetName) X(cuThreadExchangeStreamCaptureMode)            \
                                      X(cuMemGetAllocationPropertiesFromHandle) X(cuStreamGetCtx)  \
                                          X(cuGetErrorName) X(cuStreamCreate)                      \
                                              X(cuStreamSynchronize) X(cuMemcpyDtoDAsync_v2)       \
                                                  X(cuMemHostRegister_v2) X(cuMemHostUnregister)   \
                                                      X(cuMemHostAlloc) X(cuMemAllocHost_v2)       \
                                                          X(cuMemFreeHost) X(cuMemHostGetFlags)

struct RealDriver {
#define GCR_REAL_MEMBER(name) decltype(&::name) name = nullptr;
#define GCR_REAL_MEMBER_T(name, declared) decltype(&::declared) name = nullptr;
  GCR_WRAPPED_FUNCTIONS(GCR_REAL_MEMBER, GCR_REAL_MEMBER_T)
#undef GCR_REAL_MEMBER
#undef GCR_REAL_MEMBER_T
  void* handle = nullptr;
  std::string path;
};

// The real driver, loaded on first use (thread-safe, idempotent). Null when none can be loaded;
// driver_error() then says why and what to do.
const RealDriver* real_driver();
const std::string& driver_error();

// The real entry point of exported driver symbol number `index` (driver_symbols.gen.inc order),
// or a function answering CUDA_ERROR_NOT_SUPPORTED when this driver lacks it.
void* real_symbol(unsigned index);
// Exported driver symbol number `index`'s name, and the reverse map: the exported name whose real
// entry point is `address` (null if none).
const char* symbol_name(unsigned index);
const char* symbol_for_real_address(const void* address);
// The index of an exported driver symbol by name (driver_symbols.gen.inc order), or ~0u.
unsigned symbol_index(const char* name);
// The real entry point of an exported driver symbol by name, typed as F. For wrappers of names
// RealDriver does not list: `static const auto fn = real_fn<decltype(&::cuFoo)>("cuFoo_ptsz");`
template <typename F>
F real_fn(const char* name) {
  return reinterpret_cast<F>(real_symbol(symbol_index(name)));
}
// This library's own exported function for a driver symbol name (a wrapper or a trampoline).
void* own_symbol(const char* name);

}  // namespace gcr::interpose
