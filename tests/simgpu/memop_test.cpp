// Stream memory operations (cuStreamWaitValue32/64, cuStreamWriteValue32/64, cuStreamBatchMemOp)
// and kernels that synchronise through system-scope flags, within one process; ipc_test.cpp has
// the same across processes. A wait holds its stream until the condition holds; a write is a
// release, a wait an acquire.
#include <atomic>
#include <chrono>
#include <thread>

#include "common.h"

namespace fid {
namespace {

struct Stream {
  CUstream s = nullptr;
  Stream() { CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)); }
  ~Stream() { cuStreamDestroy(s); }
};

// Pinned host words the host can set while a stream waits on them, and their device address.
struct HostFlag {
  std::uint64_t* p = nullptr;
  CUdeviceptr d = 0;
  HostFlag() {
    void* h;
    CU_OK(cuMemHostAlloc(&h, 64, CU_MEMHOSTALLOC_DEVICEMAP));
    p = static_cast<std::uint64_t*>(h);
    p[0] = p[1] = 0;
    CU_OK(cuMemHostGetDevicePointer(&d, h, 0));
  }
  ~HostFlag() { cuMemFreeHost(p); }
  void set32(std::uint32_t v) {
    std::atomic_ref(*reinterpret_cast<std::uint32_t*>(p)).store(v, std::memory_order_release);
  }
  void set64(std::uint64_t v) { std::atomic_ref(p[1]).store(v, std::memory_order_release); }
};

// Does the stream stay busy for a while (a wait not yet satisfied)?
bool stays_busy(CUstream s, int ms = 150) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return cu(cuStreamQuery(s)) == "CUDA_ERROR_NOT_READY";
}

TEST_CASE("cuStreamWaitValue32 holds the stream until its condition holds, for each condition",
          "[memop]") {
  use_device0();
  struct Case {
    unsigned flags;
    std::uint32_t value, unmet, met;
  };
  const Case cases[] = {
      {CU_STREAM_WAIT_VALUE_GEQ, 10, 9, 11},
      {CU_STREAM_WAIT_VALUE_GEQ, 0xfffffff0u, 0xffffff00u, 3},  // cyclic: 3 is "after" it
      {CU_STREAM_WAIT_VALUE_EQ, 7, 8, 7},
      {CU_STREAM_WAIT_VALUE_AND, 0x30, 0x0f, 0x10},
      {CU_STREAM_WAIT_VALUE_NOR, 0xffff0000u, 0xffffffffu, 0xffff0001u},
      {CU_STREAM_WAIT_VALUE_EQ | CU_STREAM_WAIT_VALUE_FLUSH, 5, 4, 5},
  };
  for (const Case& c : cases) {
    INFO("flags " << c.flags << " value " << c.value);
    HostFlag flag;
    flag.set32(c.unmet);
    Stream s;
    CU_OK(cuStreamWaitValue32(s.s, flag.d, c.value, c.flags));
    CHECK(stays_busy(s.s));
    flag.set32(c.met);
    CU_OK(cuStreamSynchronize(s.s));
  }
}

TEST_CASE("cuStreamWaitValue64 compares all 64 bits, cyclically for GEQ", "[memop]") {
  use_device0();
  HostFlag flag;
  flag.set64(0x100000000ull);
  Stream s;
  // 32 bits would call 0x1'00000000 >= 0x0'ffffffff "equal to 0 < 0xffffffff": not met there.
  CU_OK(cuStreamWaitValue64(s.s, flag.d + 8, 0xffffffffull, CU_STREAM_WAIT_VALUE_GEQ));
  CU_OK(cuStreamSynchronize(s.s));
  CU_OK(cuStreamWaitValue64(s.s, flag.d + 8, 0x200000000ull, CU_STREAM_WAIT_VALUE_EQ));
  CHECK(stays_busy(s.s));
  flag.set64(0x200000000ull);
  CU_OK(cuStreamSynchronize(s.s));
}

TEST_CASE(
    "a write on one stream releases a wait on another, and what was written before it is seen "
    "after the wait",
    "[memop]") {
  const Kernels& k = kernels();
  const int n = 1 << 14;
  DeviceBuffer data(n * 4), out(n * 4), flags(64);
  CU_OK(cuMemsetD32(flags.get(), 0, 16));
  Stream reader, writer;
  // The reader waits, then runs a kernel over the data; the writer fills the data (a kernel),
  // then writes the flag. Whatever the reader's kernel sees must be the writer's data.
  CU_OK(cuStreamWaitValue32(reader.s, flags.get(), 1, CU_STREAM_WAIT_VALUE_EQ));
  CU_OK(cuMemcpyDtoDAsync(out.get(), data.get(), n * 4, reader.s));
  CHECK(stays_busy(reader.s));
  CU_OK(launch(k.iota, n / 256, 256, writer.s, static_cast<CUdeviceptr>(data.get()), 1000u, n));
  CU_OK(cuStreamWriteValue32(writer.s, flags.get(), 1, CU_STREAM_WRITE_VALUE_DEFAULT));
  CU_OK(cuStreamSynchronize(reader.s));
  std::vector<std::uint32_t> got = read_u32(out.get(), n);
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += got[i] != 1000u + static_cast<unsigned>(i);
  CHECK(bad == 0);
  CHECK(read_u32(flags.get(), 1)[0] == 1);
}

TEST_CASE("cuStreamBatchMemOp runs its operations in order, on device and host memory", "[memop]") {
  use_device0();
  DeviceBuffer d(64);
  CU_OK(cuMemsetD32(d.get(), 0, 16));
  HostFlag flag;
  Stream s;
  CUstreamBatchMemOpParams ops[4] = {};
  ops[0].waitValue = {CU_STREAM_MEM_OP_WAIT_VALUE_32, flag.d, {3}, CU_STREAM_WAIT_VALUE_GEQ, 0};
  ops[1].writeValue = {CU_STREAM_MEM_OP_WRITE_VALUE_64, d.get() + 8, {}, 0, 0};
  ops[1].writeValue.value64 = 0x1122334455667788ull;
  ops[2].memoryBarrier = {CU_STREAM_MEM_OP_BARRIER, CU_STREAM_MEMORY_BARRIER_TYPE_SYS};
  ops[3].writeValue = {
      CU_STREAM_MEM_OP_WRITE_VALUE_32, d.get(), {9}, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER, 0};
  CU_OK(cuStreamBatchMemOp(s.s, 4, ops, 0));
  CHECK(stays_busy(s.s));
  CHECK(read_u32(d.get(), 4) == std::vector<std::uint32_t>{0, 0, 0, 0});  // nothing ran yet
  flag.set32(3);
  CU_OK(cuStreamSynchronize(s.s));
  CHECK(read_u32(d.get(), 4) == std::vector<std::uint32_t>{9, 0, 0x55667788u, 0x11223344u});
}

TEST_CASE("stream memory operations refuse bad addresses, flags and batches", "[memop]") {
  use_device0();
  DeviceBuffer d(64);
  Stream s;
  CHECK(cu(cuStreamWaitValue32(s.s, d.get() + 2, 0, 0)) == "CUDA_ERROR_INVALID_VALUE");
  CHECK(cu(cuStreamWaitValue64(s.s, d.get() + 4, 0, 0)) == "CUDA_ERROR_INVALID_VALUE");
  CHECK(cu(cuStreamWriteValue32(s.s, d.get() + 1, 0, 0)) == "CUDA_ERROR_INVALID_VALUE");
  CHECK(cu(cuStreamWaitValue32(s.s, d.get(), 0, 0x7)) == "CUDA_ERROR_INVALID_VALUE");
  CHECK(cu(cuStreamWriteValue32(s.s, d.get(), 0, 0x2)) == "CUDA_ERROR_INVALID_VALUE");
  std::uint32_t host_word = 0;  // pageable host memory is not for the device
  CHECK(cu(cuStreamWriteValue32(s.s, reinterpret_cast<CUdeviceptr>(&host_word), 1, 0)) ==
        "CUDA_ERROR_INVALID_VALUE");
  CUdeviceptr unmapped;  // reserved address space, nothing mapped there
  CU_OK(cuMemAddressReserve(&unmapped, 2 << 20, 0, 0, 0));
  CHECK(cu(cuStreamWriteValue32(s.s, unmapped, 1, 0)) == "CUDA_ERROR_INVALID_VALUE");
  CU_OK(cuMemAddressFree(unmapped, 2 << 20));
  std::vector<CUstreamBatchMemOpParams> ops(256);
  for (auto& op : ops) op.writeValue = {CU_STREAM_MEM_OP_WRITE_VALUE_32, d.get(), {1}, 0, 0};
  CHECK(cu(cuStreamBatchMemOp(s.s, 256, ops.data(), 0)) == "CUDA_ERROR_INVALID_VALUE");
  CHECK(cu(cuStreamBatchMemOp(s.s, 1, ops.data(), 1)) == "CUDA_ERROR_INVALID_VALUE");
  ops[1].operation = static_cast<CUstreamBatchMemOpType>(99);
  CHECK(cu(cuStreamBatchMemOp(s.s, 2, ops.data(), 0)) == "CUDA_ERROR_INVALID_VALUE");
  CU_OK(cuStreamSynchronize(s.s));
  CHECK(read_u32(d.get(), 1)[0] != 1);  // a refused batch queued nothing
  int attr = 0;
  CU_OK(cuDeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 0));
  CHECK(attr == 1);
}

TEST_CASE(
    "a kernel spinning on a flag that a kernel on another stream releases completes, and sees "
    "the data written before the release",
    "[memop]") {
  const Kernels& k = kernels();
  const int n = 1024;
  DeviceBuffer data(n * 4), out(n * 4), flag(64);
  CU_OK(cuMemsetD32(flag.get(), 0, 16));
  Stream spinner, publisher;
  CU_OK(launch(k.wait_copy, 1, 1, spinner.s, static_cast<CUdeviceptr>(flag.get()), 1u,
               static_cast<CUdeviceptr>(data.get()), static_cast<CUdeviceptr>(out.get()), n));
  CHECK(stays_busy(spinner.s));
  CU_OK(launch(k.publish, 1, 1, publisher.s, static_cast<CUdeviceptr>(data.get()), n, 17u,
               static_cast<CUdeviceptr>(flag.get()), 1u));
  CU_OK(cuStreamSynchronize(spinner.s));
  std::vector<std::uint32_t> got = read_u32(out.get(), n);
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += got[i] != published(17, i);
  CHECK(bad == 0);
}

TEST_CASE("a kernel follows device pointers it reads from device memory", "[memop]") {
  const Kernels& k = kernels();
  const int n = 300, count = 3;
  DeviceBuffer a(n * 4), b(n * 4), c(n * 4), table(count * 8), out(count * n * 4);
  write_u32(a.get(), pattern_words(1, n));
  write_u32(b.get(), pattern_words(2, n));
  write_u32(c.get(), pattern_words(3, n));
  // The table holds b, c, a: device addresses, as the host (or a peer) wrote them.
  CUdeviceptr ptrs[count] = {b.get(), c.get(), a.get()};
  CU_OK(cuMemcpyHtoD(table.get(), ptrs, sizeof ptrs));
  CU_OK(launch(k.follow, (count * n + 127) / 128, 128, nullptr,
               static_cast<CUdeviceptr>(table.get()), count, n,
               static_cast<CUdeviceptr>(out.get())));
  CU_OK(cuCtxSynchronize());
  std::vector<std::uint32_t> got = read_u32(out.get(), count * n);
  const std::uint32_t seeds[count] = {2, 3, 1};
  int bad = 0;
  for (int t = 0; t < count; ++t)
    for (int i = 0; i < n; ++i) bad += got[t * n + i] != pattern(seeds[t], i);
  CHECK(bad == 0);
}

}  // namespace
}  // namespace fid
