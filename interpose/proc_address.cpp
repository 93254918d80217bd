// cuGetProcAddress: the real driver answers (so versions and stream flavours are never guessed),
// then the address it returns is mapped back to the exact exported variant it is, and the
// interposer's own function of that name is handed out instead.
#include <cstdio>

#include "real_driver.h"

namespace gcr::interpose {
namespace {

CUresult get_proc_address(const char* symbol, void** pfn, int version, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* status) {
  const RealDriver* real = real_driver();
  if (!real || !real->cuGetProcAddress_v2) return CUDA_ERROR_NOT_INITIALIZED;
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult r = real->cuGetProcAddress_v2(symbol, pfn, version, flags, &st);
  if (status) *status = st;
  if (r != CUDA_SUCCESS || !pfn || !*pfn || st != CU_GET_PROC_ADDRESS_SUCCESS) return r;
  const char* exported = symbol_for_real_address(*pfn);
  if (!exported) {
    // Not an exported driver function (private entry points): hand it through untouched.
    return r;
  }
  if (void* own = own_symbol(exported)) *pfn = own;
  return r;
}

}  // namespace
}  // namespace gcr::interpose

#undef cuGetProcAddress
extern "C" {

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status) {
  return gcr::interpose::get_proc_address(symbol, pfn, version, flags, status);
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  return gcr::interpose::get_proc_address(symbol, pfn, version, flags, nullptr);
}

}  // extern "C"
