// Modules, libraries and launches, against the fatbin nvcc built from kernels/fidelity_kernels.cu.
#include <cstring>

#include "common.h"
#include "fidelity_kernels_fatbin.h"

namespace fid {
namespace {

namespace names = embedded::fidelity_kernels::kernel;

struct Module {
  CUmodule m = nullptr;
  Module() { CU_OK(cuModuleLoadData(&m, embedded::fidelity_kernels::fatbin.data)); }
  ~Module() { cuModuleUnload(m); }
};

std::pair<size_t, size_t> param(CUfunction f, size_t index) {
  size_t offset = 99, size = 99;
  CU_OK(cuFuncGetParamInfo(f, index, &offset, &size));
  return {offset, size};
}

void check_struct_result(CUdeviceptr d, int n, const FidStructArgs& a) {
  std::vector<std::uint32_t> got = read_u32(d, n);
  int bad = 0;
  for (int i = 0; i < n; ++i)
    bad += got[i] != a.mul * static_cast<unsigned>(i) + a.add + static_cast<unsigned>(a.add64);
  CHECK(bad == 0);
}

TEST_CASE(
    "cuModuleLoadData loads the embedded fatbin and cuModuleGetFunction finds kernels by symbol",
    "[module]") {
  use_device0();
  Module mod;
  CUfunction f = nullptr;
  for (const char* name :
       {names::fid_affine, names::fid_slow_fill, names::fid_struct, names::fid_iota}) {
    INFO(name);
    CU_OK(cuModuleGetFunction(&f, mod.m, name));
    CHECK(f != nullptr);
  }
  CHECK(cu(cuModuleGetFunction(&f, mod.m, "fid_affine")) ==
        "CUDA_ERROR_NOT_FOUND");  // C++: mangled
  CHECK(cu(cuModuleGetFunction(&f, mod.m, "no_such_kernel")) == "CUDA_ERROR_NOT_FOUND");
  unsigned count = 0;
  CU_OK(cuModuleGetFunctionCount(&count, mod.m));
  CHECK(count == 7);  // the kernels of fidelity_kernels.cu
  CUmodule owner = nullptr;
  CU_OK(cuModuleGetFunction(&f, mod.m, names::fid_iota));
  CU_OK(cuFuncGetModule(&owner, f));
  CHECK(owner == mod.m);
}

TEST_CASE("a module that is not an image is refused with CUDA_ERROR_INVALID_IMAGE", "[module]") {
  use_device0();
  const unsigned char junk[64] = {1, 2, 3, 4};
  CUmodule m = nullptr;
  CHECK(cu(cuModuleLoadData(&m, junk)) == "CUDA_ERROR_INVALID_IMAGE");
}

TEST_CASE("cuFuncGetParamInfo gives each parameter's offset and size, a struct by value included",
          "[module]") {
  const Kernels& k = kernels();
  // fid_slow_fill(unsigned*, unsigned, int, unsigned long long)
  CHECK(param(k.slow_fill, 0) == std::pair<size_t, size_t>{0, 8});
  CHECK(param(k.slow_fill, 1) == std::pair<size_t, size_t>{8, 4});
  CHECK(param(k.slow_fill, 2) == std::pair<size_t, size_t>{12, 4});
  CHECK(param(k.slow_fill, 3) == std::pair<size_t, size_t>{16, 8});
  size_t offset = 0, size = 0;
  CHECK(cu(cuFuncGetParamInfo(k.slow_fill, 4, &offset, &size)) == "CUDA_ERROR_INVALID_VALUE");
  // fid_struct(int, FidStructArgs): the 24-byte struct is 8-aligned, at offset 8.
  CHECK(param(k.with_struct, 0) == std::pair<size_t, size_t>{0, 4});
  CHECK(param(k.with_struct, 1) == std::pair<size_t, size_t>{8, sizeof(FidStructArgs)});
}

TEST_CASE("cuFuncGetName returns the kernel's symbol", "[module]") {
  const Kernels& k = kernels();
  const char* name = nullptr;
  CU_OK(cuFuncGetName(&name, k.with_struct));
  CHECK(std::string(name) == names::fid_struct);
  CU_OK(cuFuncGetName(&name, k.iota));
  CHECK(std::string(name) == "fid_iota");
}

TEST_CASE("cuModuleGetGlobal finds a __device__ variable holding its initial bytes", "[module]") {
  const Kernels& k = kernels();
  CUdeviceptr d = 0;
  size_t bytes = 0;
  CU_OK(cuModuleGetGlobal(&d, &bytes, k.module, "fid_table"));
  CHECK(bytes == 16);
  CHECK(read_u32(d, 4) ==
        std::vector<std::uint32_t>{0x11111111u, 0x22222222u, 0x33333333u, 0x44444444u});
  unsigned type = 0;
  CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d));
  CHECK(type == CU_MEMORYTYPE_DEVICE);
  CHECK(cu(cuModuleGetGlobal(&d, &bytes, k.module, "no_such_global")) == "CUDA_ERROR_NOT_FOUND");
}

TEST_CASE("a kernel of a library runs through cuLibraryGetKernel and cuKernelGetFunction",
          "[module]") {
  use_device0();
  CUlibrary lib = nullptr;
  CU_OK(cuLibraryLoadData(&lib, embedded::fidelity_kernels::fatbin.data, nullptr, nullptr, 0,
                          nullptr, nullptr, 0));
  unsigned count = 0;
  CU_OK(cuLibraryGetKernelCount(&count, lib));
  CHECK(count == 7);  // the kernels of fidelity_kernels.cu
  CUkernel kernel = nullptr;
  CU_OK(cuLibraryGetKernel(&kernel, lib, "fid_iota"));
  CHECK(cu(cuLibraryGetKernel(&kernel, lib, "no_such_kernel")) == "CUDA_ERROR_NOT_FOUND");
  CU_OK(cuLibraryGetKernel(&kernel, lib, "fid_iota"));
  const char* name = nullptr;
  CU_OK(cuKernelGetName(&name, kernel));
  CHECK(std::string(name) == "fid_iota");
  CUfunction f = nullptr;
  CU_OK(cuKernelGetFunction(&f, kernel));
  const int n = 300;
  DeviceBuffer x(n * 4);
  CU_OK(launch(f, 3, 128, nullptr, x.get(), 1000u, n));
  CU_OK(cuCtxSynchronize());
  std::vector<std::uint32_t> got = read_u32(x.get(), n);
  CHECK(got[0] == 1000);
  CHECK(got[n - 1] == 1000u + n - 1);
  // A CUkernel may stand in for a CUfunction.
  CU_OK(launch(reinterpret_cast<CUfunction>(kernel), 3, 128, nullptr, x.get(), 5u, n));
  CHECK(read_u32(x.get(), n)[n - 1] == 5u + n - 1);
  CUdeviceptr table = 0;
  size_t bytes = 0;
  CU_OK(cuLibraryGetGlobal(&table, &bytes, lib, "fid_table"));
  CHECK(bytes == 16);
  CHECK(read_u32(table, 1)[0] == 0x11111111u);
  CU_OK(cuLibraryUnload(lib));
}

TEST_CASE("a struct parameter holding a device pointer reaches the kernel with a usable pointer",
          "[module]") {
  const Kernels& k = kernels();
  const int n = 500;
  DeviceBuffer out(n * 4);
  FidStructArgs a{reinterpret_cast<unsigned*>(out.get()), 3, 100, 0x100000007ull};
  CU_OK(launch(k.with_struct, 4, 128, nullptr, n, a));
  CU_OK(cuCtxSynchronize());
  check_struct_result(out.get(), n, a);
}

TEST_CASE("cuLaunchKernelEx launches with kernelParams and with a packed parameter buffer (extra)",
          "[module]") {
  const Kernels& k = kernels();
  const int n = 200;
  DeviceBuffer out(n * 4);
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUlaunchConfig config{};
  config.gridDimX = 2;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 128;
  config.blockDimY = config.blockDimZ = 1;
  config.hStream = s;

  SECTION("kernelParams") {
    int count = n;
    FidStructArgs a{reinterpret_cast<unsigned*>(out.get()), 7, 1, 2};
    void* params[] = {&count, &a};
    CU_OK(cuLaunchKernelEx(&config, k.with_struct, params, nullptr));
    CU_OK(cuStreamSynchronize(s));
    check_struct_result(out.get(), n, a);
  }
  SECTION("extra: CU_LAUNCH_PARAM_BUFFER_POINTER and _SIZE, laid out as cuFuncGetParamInfo says") {
    FidStructArgs a{reinterpret_cast<unsigned*>(out.get()), 11, 4, 0};
    auto [n_offset, n_size] = param(k.with_struct, 0);
    auto [a_offset, a_size] = param(k.with_struct, 1);
    std::vector<unsigned char> buffer(a_offset + a_size, 0xcc);
    int count = n;
    std::memcpy(buffer.data() + n_offset, &count, n_size);
    std::memcpy(buffer.data() + a_offset, &a, a_size);
    size_t buffer_size = buffer.size();
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer.data(), CU_LAUNCH_PARAM_BUFFER_SIZE,
                     &buffer_size, CU_LAUNCH_PARAM_END};
    CU_OK(cuLaunchKernelEx(&config, k.with_struct, nullptr, extra));
    CU_OK(cuStreamSynchronize(s));
    check_struct_result(out.get(), n, a);
  }
  CU_OK(cuStreamDestroy(s));
}

TEST_CASE("launches with impossible shapes are refused with CUDA_ERROR_INVALID_VALUE", "[module]") {
  const Kernels& k = kernels();
  DeviceBuffer x(4);
  CUdeviceptr p = x.get();
  unsigned kk = 1;
  int n = 1;
  void* params[] = {&p, &kk, &n};
  CHECK(cu(cuLaunchKernel(k.affine, 1, 1, 1, 2048, 1, 1, 0, nullptr, params, nullptr)) ==
        "CUDA_ERROR_INVALID_VALUE");
  CHECK(cu(cuLaunchKernel(k.affine, 0, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr)) ==
        "CUDA_ERROR_INVALID_VALUE");
  CHECK(cu(cuLaunchKernel(k.affine, 1, 1, 1, 1, 1, 128, 0, nullptr, params, nullptr)) ==
        "CUDA_ERROR_INVALID_VALUE");  // blockDim.z > 64
}

}  // namespace
}  // namespace fid
