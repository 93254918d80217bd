// Initialisation, versions and devices.
#include <cstring>
#include <set>

#include "common.h"

namespace fid {
namespace {

TEST_CASE("cuDriverGetVersion reports CUDA 13.0 (13000)", "[device]") {
  int version = 0;
  CU_OK(cuDriverGetVersion(&version));
  CHECK(version == 13000);
}

TEST_CASE("calls before cuInit fail with CUDA_ERROR_NOT_INITIALIZED, and work after it",
          "[device]") {
  Child child = Child::mode({"uninit"});
  std::vector<std::string> out = child.read_all();
  INFO("child said:\n"
       << [&] {
            std::string s;
            for (auto& l : out) s += l + "\n";
            return s;
          }());
  CHECK(value_of(out, "version") == "CUDA_SUCCESS 13000");  // needs no cuInit
  CHECK(value_of(out, "count") == "CUDA_ERROR_NOT_INITIALIZED");
  CHECK(value_of(out, "device_get") == "CUDA_ERROR_NOT_INITIALIZED");
  CHECK(value_of(out, "mem_alloc") == "CUDA_ERROR_NOT_INITIALIZED");
  CHECK(value_of(out, "ctx_get_current") == "CUDA_ERROR_NOT_INITIALIZED");
  CHECK(value_of(out, "init") == "CUDA_SUCCESS");
  CHECK(value_of(out, "count_after") == "CUDA_SUCCESS 2");
  CHECK(child.wait() == 0);
}

TEST_CASE("cuInit rejects nonzero flags", "[device]") {
  CHECK(cu(cuInit(1)) == "CUDA_ERROR_INVALID_VALUE");
}

TEST_CASE("the configured number of devices is reported, and ordinals past it are invalid",
          "[device]") {
  use_device0();
  int count = 0;
  CU_OK(cuDeviceGetCount(&count));
  CHECK(count == kDevices);
  CUdevice dev;
  CU_OK(cuDeviceGet(&dev, 1));
  CHECK(dev == 1);
  CHECK(cu(cuDeviceGet(&dev, kDevices)) == "CUDA_ERROR_INVALID_DEVICE");
  CHECK(cu(cuDeviceGet(&dev, -1)) == "CUDA_ERROR_INVALID_DEVICE");
}

TEST_CASE("every device has a name and a UUID of its own", "[device]") {
  use_device0();
  std::set<std::string> uuids;
  for (int d = 0; d < kDevices; ++d) {
    char name[256] = {};
    CU_OK(cuDeviceGetName(name, sizeof name, d));
    CHECK(std::strlen(name) > 0);
    CUuuid u;
    CU_OK(cuDeviceGetUuid(&u, d));
    uuids.insert(uuid_hex(u));
    CUuuid u2;
    CU_OK(cuDeviceGetUuid_v2(&u2, d));
    CHECK(uuid_hex(u2) == uuid_hex(u));
  }
  CHECK(uuids.size() == static_cast<std::size_t>(kDevices));
  CUuuid u;
  CHECK(cu(cuDeviceGetUuid(&u, kDevices)) == "CUDA_ERROR_INVALID_DEVICE");
}

TEST_CASE("SIMGPU_UUIDS sets the devices' UUIDs, with or without dashes", "[device]") {
  const std::string a = "00112233445566778899aabbccddeeff", b = "0f1e2d3c4b5a69788796a5b4c3d2e1f0";
  Child child =
      Child::mode({"uuids"}, {"SIMGPU_UUIDS=" + a + ",0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"});
  std::vector<std::string> out = child.read_all();
  CHECK(value_of(out, "init") == "CUDA_SUCCESS");
  CHECK(value_of(out, "uuid0") == a);
  CHECK(value_of(out, "uuid1") == b);
  CHECK(child.wait() == 0);
}

TEST_CASE("with SIMGPU_DEVICES=0 cuInit fails with CUDA_ERROR_NO_DEVICE", "[device]") {
  Child child = Child::mode({"uuids"}, {"SIMGPU_DEVICES=0"});
  std::vector<std::string> out = child.read_all();
  CHECK(value_of(out, "init") == "CUDA_ERROR_NO_DEVICE");
  CHECK(child.wait() == 0);
}

TEST_CASE("SIMGPU_DEVICES sets the device count", "[device]") {
  Child child = Child::mode({"uuids"}, {"SIMGPU_DEVICES=3"});
  std::vector<std::string> out = child.read_all();
  CHECK(value_of(out, "count") == "3");
  CHECK(!value_of(out, "uuid2").empty());
  CHECK(child.wait() == 0);
}

TEST_CASE("device attributes describe an sm_90 GPU with VMM and unified addressing", "[device]") {
  use_device0();
  auto attr = [](CUdevice_attribute a, int dev = 0) {
    int v = -1;
    CU_OK(cuDeviceGetAttribute(&v, a, dev));
    return v;
  };
  CHECK(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) == 9);
  CHECK(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) == 0);
  CHECK(attr(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) == 1);
  CHECK(attr(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED) == 1);
  CHECK(attr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING) == 1);
  CHECK(attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE) == 32);
  CHECK(attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK) == 1024);
  CHECK(attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) > 0);
  CHECK(attr(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) == 1);
  CHECK(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 1) == 9);
  int v;
  CHECK(cu(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, kDevices)) ==
        "CUDA_ERROR_INVALID_DEVICE");
  CHECK(cu(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0)) == "CUDA_ERROR_INVALID_VALUE");
}

TEST_CASE("cuDeviceTotalMem reports the configured capacity (SIMGPU_MEMORY)", "[device]") {
  use_device0();
  for (int d = 0; d < kDevices; ++d) {
    size_t bytes = 0;
    CU_OK(cuDeviceTotalMem(&bytes, d));
    CHECK(bytes == kMemoryBytes);
  }
}

TEST_CASE("PCI bus ids are distinct and map back to their device", "[device]") {
  use_device0();
  char id0[32], id1[32];
  CU_OK(cuDeviceGetPCIBusId(id0, sizeof id0, 0));
  CU_OK(cuDeviceGetPCIBusId(id1, sizeof id1, 1));
  CHECK(std::string(id0) != std::string(id1));
  CUdevice dev = -1;
  CU_OK(cuDeviceGetByPCIBusId(&dev, id1));
  CHECK(dev == 1);
}

}  // namespace
}  // namespace fid
