// cuGetProcAddress: the driver's own table of (name, version, stream flavour) -> function,
// generated from the toolkit headers (tools/driver-api), answered with simgpu's functions.
#include "gcr/driver_api.h"
#include "simgpu.h"

namespace gcr::simgpu {
void* own_symbol_address(const char* name);  // stubs.cpp

CUresult get_proc_address(const char* symbol, void** pfn, int version, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* status) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  if (version > kDriverVersion) {
    if (status) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto res = driver_api::resolve_proc(symbol, version, flags);
  switch (res.status) {
    case driver_api::ProcStatus::found:
      *pfn = own_symbol_address(res.symbol);
      if (status)
        *status = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
      return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
    case driver_api::ProcStatus::version_not_sufficient:
      if (status) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
      return CUDA_ERROR_NOT_FOUND;
    case driver_api::ProcStatus::symbol_not_found:
      if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
      return CUDA_ERROR_NOT_FOUND;
    case driver_api::ProcStatus::invalid_flags:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_ERROR_INVALID_VALUE;
}
}  // namespace gcr::simgpu

extern "C" CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                        cuuint64_t flags,
                                        CUdriverProcAddressQueryResult* symbolStatus) {
  return gcr::simgpu::get_proc_address(symbol, pfn, cudaVersion, flags, symbolStatus);
}
