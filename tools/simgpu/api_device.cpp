// cuInit, versions, devices and their attributes, error names and strings.
#include <cstdio>
#include <cstring>
#include <mutex>

#include "simgpu.h"

namespace gcr::simgpu {
namespace {

struct ErrorRow {
  int value;
  const char* name;
  const char* text;
};
constexpr ErrorRow kErrors[] = {
#include "error_table.gen.inc"
};

const ErrorRow* find_error(CUresult r) {
  for (const auto& row : kErrors)
    if (row.value == static_cast<int>(r)) return &row;
  return nullptr;
}

Device* g_devices = nullptr;
std::once_flag g_init_once;
CUresult g_init_result = CUDA_SUCCESS;

void init_once() {
  const Config& c = config();
  g_devices = new Device[c.device_count > 0 ? c.device_count : 1];
  for (int i = 0; i < c.device_count; ++i) g_devices[i].ordinal = i;
  if (c.device_count == 0) {
    g_init_result = CUDA_ERROR_NO_DEVICE;
    return;
  }
  if ((g_init_result = init_memory()) != CUDA_SUCCESS) return;
  if ((g_init_result = start_checkpoint_worker()) != CUDA_SUCCESS) return;
  g_initialized.store(true, std::memory_order_release);
  refuse_in_forked_children();
}

int attribute(CUdevice_attribute a, int ordinal) {
  const Config& c = config();
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
      return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
      return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
      return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
      return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
      return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
      return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
      return 49152;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      return 232448;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
      return 233472;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
      return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
      return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
      return 65536;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
      return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
      return 1980000;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
      return 2619000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
      return 6144;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
      return 52428800;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
      return 512;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
      return 1;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      return c.multiprocessors;
    case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT:
      return 0;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED:
      return 0;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
      return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE:
      return CU_COMPUTEMODE_DEFAULT;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
      return 1;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
      return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
      return 0x18 + physical_device(ordinal);
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
      return 0;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
      return 0;
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER:
      return 0;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
      return 3;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
      return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      return c.sm_major;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      return c.sm_minor;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
      return 1;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
      return 1;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
      return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
      return 2048;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
      return 32;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
      return 0;  // simgpu refuses managed memory
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
      return 0;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS:
      return 0;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD:
      return 0;
    case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED:
      return 0;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
      return 0;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
      return 1;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
      return 1;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
      return 1;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED:
      return 0;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED:
      return 0;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED:
      return 0;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
      return 1;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
      return CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED:
      return 0;
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED:
      return 1;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
      return 1;
    case CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED:
      return 0;
    case CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED:
      return 0;
    case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED:
      return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR:
    case CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES:
      return 1;  // api_memop.cpp
    case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT:
      return 4;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH:
      return 0;
    case CU_DEVICE_ATTRIBUTE_NUMA_CONFIG:
      return 0;
    case CU_DEVICE_ATTRIBUTE_NUMA_ID:
      return -1;
    case CU_DEVICE_ATTRIBUTE_MPS_ENABLED:
      return 0;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID:
      return 0;
    default:
      return 0;
  }
}

}  // namespace

Device& device(int ordinal) {
  return g_devices[ordinal];
}

bool valid_device(CUdevice d) {
  return d >= 0 && d < config().device_count;
}

namespace {
std::mutex g_physical_mu;
std::vector<int> g_physical;  // physical GPU by ordinal; empty: the identity
}  // namespace

int physical_device(int ordinal) {
  std::lock_guard lock(g_physical_mu);
  return ordinal >= 0 && ordinal < static_cast<int>(g_physical.size()) ? g_physical[ordinal]
                                                                       : ordinal;
}

int ordinal_of_physical(int physical) {
  for (int d = 0; d < config().device_count; ++d)
    if (physical_device(d) == physical) return d;
  return -1;
}

void set_physical_devices(const std::vector<int>& physical_by_ordinal) {
  std::lock_guard lock(g_physical_mu);
  g_physical = physical_by_ordinal;
}

CUresult charge_device(int ordinal, std::uint64_t bytes) {
  auto& used = device(ordinal).used_bytes;
  std::uint64_t cur = used.load();
  do {
    if (cur + bytes > config().memory_bytes || cur + bytes < cur) return CUDA_ERROR_OUT_OF_MEMORY;
  } while (!used.compare_exchange_weak(cur, cur + bytes));
  return CUDA_SUCCESS;
}

void uncharge_device(int ordinal, std::uint64_t bytes) {
  device(ordinal).used_bytes.fetch_sub(bytes);
}

}  // namespace gcr::simgpu

using namespace gcr::simgpu;

extern "C" {

CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (g_forked_child.load(std::memory_order_acquire))
    return CUDA_ERROR_NOT_INITIALIZED;  // Note [Forked child]
  std::call_once(g_init_once, init_once);
  return g_init_result;
}

CUresult cuDriverGetVersion(int* version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = kDriverVersion;
  return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult error, const char** str) {
  if (!str) return CUDA_ERROR_INVALID_VALUE;
  const ErrorRow* row = find_error(error);
  *str = row ? row->name : nullptr;
  return row ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char** str) {
  if (!str) return CUDA_ERROR_INVALID_VALUE;
  const ErrorRow* row = find_error(error);
  *str = row ? row->text : nullptr;
  return row ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuDeviceGetCount(int* count) {
  SIMGPU_API_BEGIN();
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = config().device_count;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* dev, int ordinal) {
  SIMGPU_API_BEGIN();
  if (!dev) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  SIMGPU_API_BEGIN();
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<std::size_t>(len), "%s", config().name.c_str());
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  SIMGPU_API_BEGIN();
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *uuid = config().uuids[physical_device(dev)];
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  SIMGPU_API_BEGIN();
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = config().memory_bytes;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attrib, CUdevice dev) {
  SIMGPU_API_BEGIN();
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  *value = attribute(attrib, dev);
  return CUDA_SUCCESS;
}

CUresult cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) {
  SIMGPU_API_BEGIN();
  if (!major || !minor) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *major = config().sm_major;
  *minor = config().sm_minor;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  SIMGPU_API_BEGIN();
  if (!pciBusId || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(pciBusId, static_cast<std::size_t>(len), "0000:%02X:00.0",
                0x18 + physical_device(dev));
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetByPCIBusId(CUdevice* dev, const char* pciBusId) {
  SIMGPU_API_BEGIN();
  if (!dev || !pciBusId) return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < config().device_count; ++i) {
    char id[32];
    std::snprintf(id, sizeof id, "0000:%02X:00.0", 0x18 + physical_device(i));
    if (strcasecmp(id, pciBusId) == 0 || strcasecmp(id + 5, pciBusId) == 0) {
      *dev = i;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_DEVICE;
}

CUresult cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev, CUdevice peerDev) {
  SIMGPU_API_BEGIN();
  if (!canAccessPeer) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev) || !valid_device(peerDev)) return CUDA_ERROR_INVALID_DEVICE;
  *canAccessPeer = dev != peerDev;
  return CUDA_SUCCESS;
}

}  // extern "C"
