// Older exported names whose ABI is unchanged in the newer variant: cuda.h renames the base
// name to the newest variant with a macro, so these are defined here with the macro undone.
#include "simgpu.h"

#undef cuDeviceGetUuid
#undef cuEventElapsedTime

extern "C" {
CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  return cuDeviceGetUuid_v2(uuid, dev);
}
CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  return cuEventElapsedTime_v2(ms, start, end);
}
}

#undef cuGetProcAddress
namespace gcr::simgpu {
CUresult get_proc_address(const char* symbol, void** pfn, int version, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* status);
}
extern "C" CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                     cuuint64_t flags) {
  return gcr::simgpu::get_proc_address(symbol, pfn, cudaVersion, flags, nullptr);
}
