// Device memory the cuMemAlloc way, copies and memsets, pinned host memory, pointer attributes,
// and the device's capacity.
#include <sys/mman.h>
#include <sys/wait.h>

#include <cstring>

#include "common.h"

namespace fid {
namespace {

struct Pinned {
  void* p = nullptr;
  explicit Pinned(std::size_t bytes) { CU_OK(cuMemAllocHost(&p, bytes)); }
  ~Pinned() { cuMemFreeHost(p); }
  std::uint32_t* words() { return static_cast<std::uint32_t*>(p); }
};

struct Stream {
  CUstream s = nullptr;
  explicit Stream(unsigned flags = CU_STREAM_NON_BLOCKING) { CU_OK(cuStreamCreate(&s, flags)); }
  ~Stream() { cuStreamDestroy(s); }
};

TEST_CASE("cuMemAlloc returns distinct aligned device memory that cuMemFree gives back",
          "[memory]") {
  use_device0();
  CUdeviceptr a = 0, b = 0;
  CU_OK(cuMemAlloc(&a, 1000));
  CU_OK(cuMemAlloc(&b, 1));
  CHECK(a != b);
  CHECK(a % 256 == 0);
  CHECK(b % 256 == 0);
  CHECK((b >= a + 1000 || a >= b + 1));
  CU_OK(cuMemFree(a));
  CU_OK(cuMemFree(b));
  CHECK(cu(cuMemFree(a)) == "CUDA_ERROR_INVALID_VALUE");  // twice
  CU_OK(cuMemFree(0));
  CHECK(cu(cuMemAlloc(&a, 0)) == "CUDA_ERROR_INVALID_VALUE");
}

TEST_CASE("synchronous copies carry bytes host to device, device to device and device to host",
          "[memory]") {
  use_device0();
  const std::size_t n = 64 * 1024;
  DeviceBuffer a(n * 4), b(n * 4);
  std::vector<std::uint32_t> src = pattern_words(11, n), out(n);
  CU_OK(cuMemcpyHtoD(a.get(), src.data(), n * 4));
  CU_OK(cuMemcpyDtoD(b.get(), a.get(), n * 4));
  CU_OK(cuMemcpyDtoH(out.data(), b.get(), n * 4));
  CHECK(out == src);
  // Interior offsets and odd sizes.
  std::vector<std::uint8_t> bytes(37, 0xee);
  CU_OK(cuMemcpyHtoD(a.get() + 3, bytes.data(), bytes.size()));
  CU_OK(cuMemcpyDtoH(out.data(), a.get(), 64));
  auto* raw = reinterpret_cast<std::uint8_t*>(out.data());
  auto* want = reinterpret_cast<const std::uint8_t*>(src.data());
  CHECK(std::memcmp(raw, want, 3) == 0);
  CHECK(std::memcmp(raw + 3, bytes.data(), 37) == 0);
  CHECK(std::memcmp(raw + 40, want + 40, 24) == 0);
}

TEST_CASE("cuMemcpy with unified addressing copies between any host and device pointers",
          "[memory]") {
  use_device0();
  const std::size_t n = 4096;
  DeviceBuffer a(n * 4), b(n * 4);
  std::vector<std::uint32_t> src = pattern_words(12, n), out(n), host_copy(n);
  CU_OK(cuMemcpy(a.get(), reinterpret_cast<CUdeviceptr>(src.data()), n * 4));  // host -> device
  CU_OK(cuMemcpy(b.get(), a.get(), n * 4));                                    // device -> device
  CU_OK(cuMemcpy(reinterpret_cast<CUdeviceptr>(out.data()), b.get(), n * 4));  // device -> host
  CHECK(out == src);
  CU_OK(cuMemcpy(reinterpret_cast<CUdeviceptr>(host_copy.data()),
                 reinterpret_cast<CUdeviceptr>(out.data()), n * 4));  // host -> host
  CHECK(host_copy == src);
}

TEST_CASE("async copies with pinned memory run in stream order, after earlier work", "[memory]") {
  use_device0();
  const std::size_t n = 16 * 1024;
  Stream s;
  DeviceBuffer d(n * 4), d2(n * 4);
  Pinned src(n * 4), dst(n * 4);
  for (std::size_t i = 0; i < n; ++i) src.words()[i] = pattern(13, i), dst.words()[i] = 0;
  StreamLatch latch;
  CU_OK(latch.hold(s.s));
  CU_OK(cuMemcpyHtoDAsync(d.get(), src.p, n * 4, s.s));
  CU_OK(cuMemcpyDtoDAsync(d2.get(), d.get(), n * 4, s.s));
  CU_OK(cuMemcpyDtoHAsync(dst.p, d2.get(), n * 4, s.s));
  CHECK(cu(cuStreamQuery(s.s)) == "CUDA_ERROR_NOT_READY");
  CHECK(dst.words()[0] == 0);  // nothing has run: the stream is held
  CHECK(dst.words()[n - 1] == 0);
  latch.open();
  CU_OK(cuStreamSynchronize(s.s));
  CHECK(std::memcmp(dst.p, src.p, n * 4) == 0);
}

TEST_CASE("an async copy from pageable memory takes the bytes the source held at the call",
          "[memory]") {
  use_device0();
  const std::size_t n = 256 * 1024;
  Stream s;
  DeviceBuffer d(n * 4);
  std::vector<std::uint32_t> src = pattern_words(14, n);
  const std::vector<std::uint32_t> original = src;
  StreamLatch latch;
  CU_OK(latch.hold(s.s));  // the copy cannot run before the source is overwritten
  CU_OK(cuMemcpyHtoDAsync(d.get(), src.data(), n * 4, s.s));
  std::fill(src.begin(), src.end(), 0xdeadbeefu);
  latch.open();
  CU_OK(cuStreamSynchronize(s.s));
  CHECK(read_u32(d.get(), n) == original);
}

TEST_CASE("an async copy to pageable memory returns only once the copy is done", "[memory]") {
  use_device0();
  const std::size_t n = 4096;
  Stream s;
  DeviceBuffer d(n * 4);
  write_u32(d.get(), pattern_words(15, n));
  std::vector<std::uint32_t> out(n, 0);
  StreamLatch latch;
  CU_OK(latch.hold(s.s));
  std::string result;
  {
    Background copy([&] {
      cuCtxSetCurrent(primary_context(0));
      result = cu(cuMemcpyDtoHAsync(out.data(), d.get(), n * 4, s.s));
    });
    CHECK_FALSE(copy.wait_for(300));  // held behind the latch
    latch.open();
    CHECK(copy.wait_for(10000));
  }
  CHECK(result == "CUDA_SUCCESS");
  CHECK(out == pattern_words(15, n));  // complete when the call returned, no synchronize needed
}

TEST_CASE("cuMemAllocPitch gives rows at least as wide as asked, and 2-D copies honour pitches",
          "[memory]") {
  use_device0();
  const std::size_t width = 100, height = 8;
  CUdeviceptr d = 0;
  size_t pitch = 0;
  CU_OK(cuMemAllocPitch(&d, &pitch, width, height, 4));
  CHECK(pitch >= width);
  CHECK(pitch % 4 == 0);
  std::vector<std::uint8_t> src(width * height), out(width * height, 0);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint8_t>(i * 7 + 1);
  CUDA_MEMCPY2D up{};
  up.srcMemoryType = CU_MEMORYTYPE_HOST;
  up.srcHost = src.data();
  up.srcPitch = width;
  up.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  up.dstDevice = d;
  up.dstPitch = pitch;
  up.WidthInBytes = width;
  up.Height = height;
  CU_OK(cuMemcpy2D(&up));
  // Row r starts at d + r * pitch.
  std::vector<std::uint8_t> row(width);
  CU_OK(cuMemcpyDtoH(row.data(), d + 5 * pitch, width));
  CHECK(std::memcmp(row.data(), src.data() + 5 * width, width) == 0);
  CUDA_MEMCPY2D down{};
  down.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  down.srcDevice = d;
  down.srcPitch = pitch;
  down.dstMemoryType = CU_MEMORYTYPE_HOST;
  down.dstHost = out.data();
  down.dstPitch = width;
  down.WidthInBytes = width;
  down.Height = height;
  CU_OK(cuMemcpy2D(&down));
  CHECK(out == src);
  CU_OK(cuMemFree(d));
}

TEST_CASE("cuMemGetInfo reports the capacity and what allocations take from it", "[memory]") {
  use_device0();
  size_t free0 = 0, total = 0;
  CU_OK(cuMemGetInfo(&free0, &total));
  CHECK(total == kMemoryBytes);
  CHECK(free0 <= total);
  CUdeviceptr d;
  CU_OK(cuMemAlloc(&d, 32 << 20));
  size_t free1 = 0;
  CU_OK(cuMemGetInfo(&free1, &total));
  CHECK(free0 - free1 >= (32u << 20));
  CU_OK(cuMemFree(d));
  size_t free2 = 0;
  CU_OK(cuMemGetInfo(&free2, &total));
  CHECK(free2 == free0);
}

TEST_CASE("memsets of 8, 16 and 32 bits fill exactly the range asked", "[memory]") {
  use_device0();
  const std::size_t n = 64;  // words
  DeviceBuffer d(n * 4);
  const std::vector<std::uint32_t> background(n, 0x5a5a5a5au);
  auto check_fills = [&](const std::vector<std::uint32_t>& got) {
    auto* b = reinterpret_cast<const std::uint8_t*>(got.data());
    CHECK(b[0] == 0x5a);
    for (int i = 1; i <= 5; ++i) CHECK(b[i] == 0xab);  // D8 at byte 1, 5 bytes
    CHECK(b[6] == 0x5a);
    std::uint16_t h[3];
    std::memcpy(h, b + 8, 6);  // D16 at byte 8, 3 elements
    for (auto x : h) CHECK(x == 0xbeef);
    CHECK(b[14] == 0x5a);
    for (std::size_t i = 4; i < 8; ++i) CHECK(got[i] == 0xcafef00du);  // D32 at word 4, 4 words
    CHECK(got[8] == 0x5a5a5a5au);
    CHECK(got[n - 1] == 0x5a5a5a5au);
  };
  SECTION("synchronous") {
    write_u32(d.get(), background);
    CU_OK(cuMemsetD8(d.get() + 1, 0xab, 5));
    CU_OK(cuMemsetD16(d.get() + 8, 0xbeef, 3));
    CU_OK(cuMemsetD32(d.get() + 16, 0xcafef00du, 4));
    check_fills(read_u32(d.get(), n));
  }
  SECTION("stream-ordered") {
    Stream s;
    write_u32(d.get(), background);
    StreamLatch latch;
    CU_OK(latch.hold(s.s));
    CU_OK(cuMemsetD8Async(d.get() + 1, 0xab, 5, s.s));
    CU_OK(cuMemsetD16Async(d.get() + 8, 0xbeef, 3, s.s));
    CU_OK(cuMemsetD32Async(d.get() + 16, 0xcafef00du, 4, s.s));
    CHECK(read_u32(d.get(), n) == background);  // held: nothing written yet
    latch.open();
    CU_OK(cuStreamSynchronize(s.s));
    check_fills(read_u32(d.get(), n));
  }
  CHECK(cu(cuMemsetD16(d.get() + 1, 0, 1)) == "CUDA_ERROR_INVALID_VALUE");  // misaligned
  CHECK(cu(cuMemsetD32(d.get() + 2, 0, 1)) == "CUDA_ERROR_INVALID_VALUE");
}

TEST_CASE("cuMemAllocAsync memory is usable in stream order and cuMemFreeAsync returns it",
          "[memory]") {
  use_device0();
  Stream s;
  size_t free0 = 0, total = 0;
  CU_OK(cuMemGetInfo(&free0, &total));
  const std::size_t n = 256 * 1024;
  CUdeviceptr d = 0;
  CU_OK(cuMemAllocAsync(&d, n * 4, s.s));
  CHECK(d != 0);
  Pinned out(n * 4);
  CU_OK(cuMemsetD32Async(d, 0x01020304u, n, s.s));
  CU_OK(cuMemcpyDtoHAsync(out.p, d, n * 4, s.s));
  CUmemoryPool pool = nullptr, default_pool = nullptr;
  CU_OK(cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, d));
  CU_OK(cuDeviceGetDefaultMemPool(&default_pool, 0));
  CHECK(pool == default_pool);
  CU_OK(cuMemFreeAsync(d, s.s));
  CU_OK(cuStreamSynchronize(s.s));
  CHECK(out.words()[0] == 0x01020304u);
  CHECK(out.words()[n - 1] == 0x01020304u);
  size_t free1 = 0;
  CU_OK(cuMemGetInfo(&free1, &total));
  CHECK(free1 == free0);
  CHECK(cu(cuMemFreeAsync(d, s.s)) == "CUDA_ERROR_INVALID_VALUE");  // already freed
}

TEST_CASE("pinned host memory is allocated, flagged and freed by the driver", "[memory]") {
  use_device0();
  SECTION("cuMemAllocHost") {
    void* p = nullptr;
    CU_OK(cuMemAllocHost(&p, 12345));
    std::memset(p, 0x77, 12345);  // host-writable
    unsigned type = 0;
    CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                reinterpret_cast<CUdeviceptr>(p)));
    CHECK(type == CU_MEMORYTYPE_HOST);
    unsigned flags = 0;
    CU_OK(cuMemHostGetFlags(&flags, static_cast<char*>(p) + 100));  // an interior pointer
    CU_OK(cuMemFreeHost(p));
    CHECK(cu(cuMemFreeHost(p)) == "CUDA_ERROR_INVALID_VALUE");
  }
  SECTION("cuMemHostAlloc, mapped into the device address space") {
    void* p = nullptr;
    CU_OK(cuMemHostAlloc(&p, 4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    unsigned flags = 0;
    CU_OK(cuMemHostGetFlags(&flags, p));
    CHECK((flags & CU_MEMHOSTALLOC_DEVICEMAP) != 0);
    CHECK((flags & CU_MEMHOSTALLOC_PORTABLE) != 0);
    CUdeviceptr dp = 0;
    CU_OK(cuMemHostGetDevicePointer(&dp, p, 0));
    CHECK(dp == reinterpret_cast<CUdeviceptr>(p));  // unified addressing
    std::memset(p, 0x42, 4096);
    DeviceBuffer d(4096);
    CU_OK(cuMemcpyDtoD(d.get(), dp, 4096));
    CHECK(read_u32(d.get(), 1024)[1023] == 0x42424242u);
    CU_OK(cuMemFreeHost(p));
  }
  SECTION("cuMemHostRegister pins memory the program allocated") {
    const std::size_t bytes = 8 * 4096;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    auto ptr = reinterpret_cast<CUdeviceptr>(p);
    unsigned type = 0;
    CHECK(cu(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr)) ==
          "CUDA_ERROR_INVALID_VALUE");
    CU_OK(cuMemHostRegister(p, bytes, CU_MEMHOSTREGISTER_PORTABLE));
    CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr + 5000));
    CHECK(type == CU_MEMORYTYPE_HOST);
    CHECK(cu(cuMemHostRegister(p, 4096, 0)) == "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED");
    CHECK(cu(cuMemFreeHost(p)) == "CUDA_ERROR_INVALID_VALUE");  // not the driver's to free
    CU_OK(cuMemHostUnregister(p));
    CHECK(cu(cuMemHostUnregister(p)) == "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED");
    munmap(p, bytes);
  }
}

TEST_CASE("pointer attributes describe device memory, including interior pointers", "[memory]") {
  use_device0();
  DeviceBuffer a(10000), b(512);
  const CUdeviceptr inside = a.get() + 1234;
  unsigned type = 0;
  CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, inside));
  CHECK(type == CU_MEMORYTYPE_DEVICE);
  CUdeviceptr dp = 0, start = 0;
  CU_OK(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, inside));
  CHECK(dp == inside);
  CU_OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, inside));
  CHECK(start == a.get());
  size_t size = 0;
  CU_OK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, inside));
  CHECK(size >= 10000);
  CUcontext ctx = nullptr;
  CU_OK(cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, inside));
  CHECK(ctx == primary_context(0));
  int ordinal = -1;
  CU_OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, inside));
  CHECK(ordinal == 0);
  unsigned long long id_a = 0, id_b = 0;
  CU_OK(cuPointerGetAttribute(&id_a, CU_POINTER_ATTRIBUTE_BUFFER_ID, inside));
  CU_OK(cuPointerGetAttribute(&id_b, CU_POINTER_ATTRIBUTE_BUFFER_ID, b.get()));
  CHECK(id_a != id_b);
  void* host = nullptr;
  CHECK(cu(cuPointerGetAttribute(&host, CU_POINTER_ATTRIBUTE_HOST_POINTER, inside)) ==
        "CUDA_ERROR_INVALID_VALUE");
  CUdeviceptr base = 0;
  size_t range = 0;
  CU_OK(cuMemGetAddressRange(&base, &range, inside));
  CHECK(base == a.get());
  CHECK(range >= 10000);

  SECTION("cuPointerGetAttributes answers several at once") {
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT,
                                   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    unsigned t = 0;
    CUcontext c = nullptr;
    int o = -1;
    void* data[] = {&t, &c, &o};
    CU_OK(cuPointerGetAttributes(3, attrs, data, inside));
    CHECK(t == CU_MEMORYTYPE_DEVICE);
    CHECK(c == primary_context(0));
    CHECK(o == 0);
  }
  SECTION("cuPointerGetAttributes of memory the driver does not know answers zeros, not an error") {
    int local = 0;
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT};
    unsigned t = 77;
    CUcontext c = reinterpret_cast<CUcontext>(1);
    void* data[] = {&t, &c};
    CU_OK(cuPointerGetAttributes(2, attrs, data, reinterpret_cast<CUdeviceptr>(&local)));
    CHECK(t == 0);
    CHECK(c == nullptr);
  }
}

TEST_CASE("copies and memsets outside live allocations are refused", "[memory]") {
  // Ranges are checked against the allocation's address range (cuMemGetAddressRange): 4096
  // bytes is a whole number of simgpu's 512-byte allocation units.
  use_device0();
  CUdeviceptr d;
  CU_OK(cuMemAlloc(&d, 4096));
  std::vector<std::uint8_t> buf(8192);
  CHECK(cu(cuMemcpyHtoD(d + 4096 - 16, buf.data(), 32)) == "CUDA_ERROR_INVALID_VALUE");
  CHECK(cu(cuMemcpyDtoH(buf.data(), d, 8192)) == "CUDA_ERROR_INVALID_VALUE");
  CU_OK(cuMemFree(d));
  CHECK(cu(cuMemcpyDtoH(buf.data(), d, 16)) == "CUDA_ERROR_INVALID_VALUE");
  CHECK(cu(cuMemsetD8(d, 0, 16)) == "CUDA_ERROR_INVALID_VALUE");
}

TEST_CASE(
    "allocation fails with CUDA_ERROR_OUT_OF_MEMORY at the capacity, and freed memory is "
    "allocatable again",
    "[memory]") {
  use_device0();
  const std::size_t chunk = 16 << 20;
  CUdeviceptr d;
  CHECK(cu(cuMemAlloc(&d, kMemoryBytes + 1)) == "CUDA_ERROR_OUT_OF_MEMORY");
  size_t free0 = 0, total = 0;
  CU_OK(cuMemGetInfo(&free0, &total));
  std::vector<CUdeviceptr> chunks;
  CUresult r = CUDA_SUCCESS;
  while (chunks.size() <= kMemoryBytes / chunk) {
    r = cuMemAlloc(&d, chunk);
    if (r != CUDA_SUCCESS) break;
    chunks.push_back(d);
  }
  CHECK(cu(r) == "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK(chunks.size() == free0 / chunk);
  size_t free1 = 0;
  CU_OK(cuMemGetInfo(&free1, &total));
  CHECK(free1 < chunk);
  CHECK(cu(cuMemAllocAsync(&d, chunk, nullptr)) == "CUDA_ERROR_OUT_OF_MEMORY");

  // The other device is not affected.
  CU_OK(cuCtxPushCurrent(primary_context(1)));
  CUdeviceptr other;
  CU_OK(cuMemAlloc(&other, chunk));
  CU_OK(cuMemFree(other));
  CU_OK(cuCtxPopCurrent(nullptr));

  CU_OK(cuMemFree(chunks.back()));
  chunks.pop_back();
  CU_OK(cuMemAlloc(&d, chunk));
  chunks.push_back(d);
  for (CUdeviceptr c : chunks) CU_OK(cuMemFree(c));
  size_t free2 = 0;
  CU_OK(cuMemGetInfo(&free2, &total));
  CHECK(free2 == free0);
}

TEST_CASE("a host load from a device pointer faults (SIGSEGV), as on a GPU", "[memory]") {
  Child child = Child::mode({"deref", "heap"});
  std::optional<std::string> line = child.read_line();
  REQUIRE(line);
  CHECK(words(*line).at(0) == "touching");
  CHECK_FALSE(child.read_line());  // dies without a word
  int status = child.wait();
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGSEGV);
}

}  // namespace
}  // namespace fid
