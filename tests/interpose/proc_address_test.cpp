// cuGetProcAddress through the interposer (interpose/proc_address.cpp): the real driver picks the
// variant for the version and stream flavour asked for, and the interposer hands out its own
// function of exactly that name. In-process: this program runs under gcr.
#include <dlfcn.h>

#include <cstring>

#include "common.h"

namespace ipt {
namespace {

// The interposer, as loaded in this process.
void* interposer() {
  static void* handle = dlopen(interposer_path().c_str(), RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(handle != nullptr);
  return handle;
}

struct Query {
  const char* symbol;
  int version;
  cuuint64_t flags;
  const char* variant;  // the exported name the answer must be
};

TEST_CASE("cuGetProcAddress returns the interposer's own function of the exact variant asked for",
          "[proc]") {
  require_under_gcr();
  use_device(0);
  const Query queries[] = {
      {"cuMemAlloc", 3020, CU_GET_PROC_ADDRESS_DEFAULT, "cuMemAlloc_v2"},
      {"cuMemAlloc", 13000, CU_GET_PROC_ADDRESS_DEFAULT, "cuMemAlloc_v2"},
      {"cuMemAlloc", 2000, CU_GET_PROC_ADDRESS_DEFAULT, "cuMemAlloc"},
      {"cuMemFree", 3020, CU_GET_PROC_ADDRESS_DEFAULT, "cuMemFree_v2"},
      {"cuMemcpyHtoDAsync", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
       "cuMemcpyHtoDAsync_v2_ptsz"},
      {"cuMemcpyHtoDAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
       "cuMemcpyHtoDAsync_v2_ptsz"},
      {"cuMemcpyHtoDAsync", 3020, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuMemcpyHtoDAsync_v2"},
      {"cuMemcpyHtoD", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
       "cuMemcpyHtoD_v2_ptds"},
      {"cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
       "cuLaunchKernel_ptsz"},
      {"cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuLaunchKernel"},
      {"cuMemsetD32", 3020, CU_GET_PROC_ADDRESS_DEFAULT, "cuMemsetD32_v2"},
      {"cuMemAllocAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
       "cuMemAllocAsync_ptsz"},
      {"cuStreamSynchronize", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
       "cuStreamSynchronize_ptsz"},
      {"cuGetProcAddress", 12000, CU_GET_PROC_ADDRESS_DEFAULT, "cuGetProcAddress_v2"},
      {"cuGetProcAddress", 11030, CU_GET_PROC_ADDRESS_DEFAULT, "cuGetProcAddress"},
      {"cuInit", 2000, CU_GET_PROC_ADDRESS_DEFAULT, "cuInit"},
  };
  for (const Query& q : queries) {
    INFO(q.symbol << " @" << q.version << " flags " << q.flags << " -> " << q.variant);
    void* want = dlsym(interposer(), q.variant);
    REQUIRE(want != nullptr);
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CU_OK(cuGetProcAddress_v2(q.symbol, &fn, q.version, q.flags, &status));
    CHECK(status == CU_GET_PROC_ADDRESS_SUCCESS);
    CHECK(fn == want);
    // The old entry point (no status argument) answers the same.
    auto v1 = reinterpret_cast<CUresult (*)(const char*, void**, int, cuuint64_t)>(
        dlsym(interposer(), "cuGetProcAddress"));
    REQUIRE(v1 != nullptr);
    void* fn1 = nullptr;
    CU_OK(v1(q.symbol, &fn1, q.version, q.flags));
    CHECK(fn1 == want);
  }
}

TEST_CASE("cuGetProcAddress of an unknown name is CUDA_ERROR_NOT_FOUND through the interposer",
          "[proc]") {
  require_under_gcr();
  use_device(0);
  void* fn = reinterpret_cast<void*>(1);
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  CHECK(cu(cuGetProcAddress_v2("cuNoSuchFunction", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT,
                               &status)) == "CUDA_ERROR_NOT_FOUND");
  CHECK(status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  CHECK(fn == nullptr);
}

TEST_CASE("functions from cuGetProcAddress work and allocate in gcr regions", "[proc]") {
  require_under_gcr();
  use_device(0);
  CUdriverProcAddressQueryResult status;
  void* p = nullptr;
  CU_OK(cuGetProcAddress_v2("cuMemAlloc", &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status));
  auto alloc = reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t)>(p);
  CU_OK(cuGetProcAddress_v2("cuMemcpyHtoDAsync", &p, 12000,
                            CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
  auto copy_ptsz = reinterpret_cast<CUresult (*)(CUdeviceptr, const void*, size_t, CUstream)>(p);
  CU_OK(cuGetProcAddress_v2("cuStreamSynchronize", &p, 12000,
                            CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
  auto sync_ptsz = reinterpret_cast<CUresult (*)(CUstream)>(p);
  CU_OK(cuGetProcAddress_v2("cuMemFree", &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status));
  auto free_fn = reinterpret_cast<CUresult (*)(CUdeviceptr)>(p);
  CU_OK(cuGetProcAddress_v2("cuGetProcAddress", &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status));
  auto get_proc = reinterpret_cast<decltype(&cuGetProcAddress_v2)>(p);

  CUdeviceptr d = 0;
  CU_OK(alloc(&d, 1000));
  const unsigned words[4] = {1, 2, 3, 4};
  CU_OK(copy_ptsz(d, words, sizeof words, CU_STREAM_PER_THREAD));
  CU_OK(sync_ptsz(CU_STREAM_PER_THREAD));
  unsigned back[4] = {};
  CU_OK(cuMemcpyDtoH(back, d, sizeof back));
  CHECK(std::memcmp(back, words, sizeof words) == 0);

  // The pointer is gcr's.
  control::Client client = connect(getpid());
  auto regions = client.regions();
  REQUIRE(regions);
  CHECK(region_holding(*regions, d, 1000) != nullptr);
  REQUIRE(client.close());

  // cuGetProcAddress from cuGetProcAddress is ours again.
  void* again = nullptr;
  CU_OK(get_proc("cuMemAlloc", &again, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status));
  CHECK(again == reinterpret_cast<void*>(alloc));
  CU_OK(free_fn(d));
}

}  // namespace
}  // namespace ipt
