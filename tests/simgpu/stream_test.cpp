// Streams and events: in-order asynchronous execution, cross-stream waits, the legacy and
// per-thread default streams, host functions and event timing.
//
// Ordering is made deterministic with a StreamLatch: a stream held by one cannot have run what
// was queued behind it, whatever the machine's speed.
#include <cstring>
#include <mutex>

#include "common.h"

namespace fid {
namespace {

struct Stream {
  CUstream s = nullptr;
  explicit Stream(unsigned flags) { CU_OK(cuStreamCreate(&s, flags)); }
  ~Stream() { cuStreamDestroy(s); }
};

struct Pinned {
  void* p = nullptr;
  explicit Pinned(std::size_t bytes) { CU_OK(cuMemAllocHost(&p, bytes)); }
  ~Pinned() { cuMemFreeHost(p); }
  std::uint32_t* words() { return static_cast<std::uint32_t*>(p); }
};

std::vector<std::uint32_t> iota_words(std::size_t n) {
  std::vector<std::uint32_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint32_t>(i);
  return v;
}

void check_affine_sequence(CUdeviceptr d, int n, std::uint32_t k0, int launches) {
  std::vector<std::uint32_t> got = read_u32(d, n);
  int bad = 0;
  for (int i = 0; i < n; ++i)
    if (got[i] != affine_sequence(static_cast<std::uint32_t>(i), k0, launches)) ++bad;
  CHECK(bad == 0);
}

TEST_CASE("an async kernel sequence on one stream runs in submission order", "[stream]") {
  const Kernels& k = kernels();
  const int n = 1000, launches = 20;
  DeviceBuffer x(n * 4);
  write_u32(x.get(), iota_words(n));
  auto run = [&](CUstream s) {
    StreamLatch latch;
    CU_OK(latch.hold(s));  // everything is queued before anything runs
    for (int j = 0; j < launches; ++j) CU_OK(launch(k.affine, 8, 128, s, x.get(), 1u + j, n));
    latch.open();
    CU_OK(cuStreamSynchronize(s));
  };
  SECTION("a created stream") {
    Stream s(CU_STREAM_NON_BLOCKING);
    run(s.s);
  }
  SECTION("the legacy default stream") {
    run(nullptr);
  }
  SECTION("the per-thread default stream") {
    run(CU_STREAM_PER_THREAD);
  }
  check_affine_sequence(x.get(), n, 1, launches);
}

TEST_CASE("a stream waiting on an event sees everything the other stream did before the event",
          "[stream]") {
  const Kernels& k = kernels();
  const int n = 256;
  Stream a(CU_STREAM_NON_BLOCKING), b(CU_STREAM_NON_BLOCKING);
  DeviceBuffer buf(n * 4), copy(n * 4);
  CU_OK(cuMemsetD32(buf.get(), 0, n));
  CU_OK(cuMemsetD32(copy.get(), 0, n));
  Pinned out(n * 4);
  CUevent done;
  CU_OK(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
  StreamLatch latch;
  CU_OK(latch.hold(a.s));
  CU_OK(launch(k.slow_fill, 2, 128, a.s, buf.get(), 0xa11ceu, n,
               20000ull));                                 // slow, then final data:
  CU_OK(launch(k.affine, 2, 128, a.s, buf.get(), 5u, n));  // 0xa11ce * 3 + 5
  CU_OK(cuEventRecord(done, a.s));
  CU_OK(cuStreamWaitEvent(b.s, done, 0));
  CU_OK(cuMemcpyDtoDAsync(copy.get(), buf.get(), n * 4, b.s));
  CU_OK(cuMemcpyDtoHAsync(out.p, copy.get(), n * 4, b.s));
  CHECK(cu(cuStreamQuery(b.s)) == "CUDA_ERROR_NOT_READY");  // b waits for a, which is held
  CHECK(cu(cuEventQuery(done)) == "CUDA_ERROR_NOT_READY");
  latch.open();
  CU_OK(cuStreamSynchronize(b.s));
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += out.words()[i] != 0xa11ceu * 3 + 5;
  CHECK(bad == 0);
  CU_OK(cuEventQuery(done));
  CU_OK(cuEventDestroy(done));
}

TEST_CASE("cuStreamQuery reports pending work and cuStreamSynchronize waits for it", "[stream]") {
  use_device0();
  Stream s(CU_STREAM_NON_BLOCKING);
  CU_OK(cuStreamQuery(s.s));  // idle
  StreamLatch latch;
  CU_OK(latch.hold(s.s));
  CHECK(cu(cuStreamQuery(s.s)) == "CUDA_ERROR_NOT_READY");
  std::string result;
  {
    Background sync([&] {
      cuCtxSetCurrent(primary_context(0));
      result = cu(cuStreamSynchronize(s.s));
    });
    CHECK_FALSE(sync.wait_for(300));
    latch.open();
    CHECK(sync.wait_for(10000));
  }
  CHECK(result == "CUDA_SUCCESS");
  CU_OK(cuStreamQuery(s.s));
}

struct HostLog {
  std::mutex mu;
  std::vector<std::uint32_t> seen;
  std::uint32_t* source = nullptr;
  static void CUDA_CB record(void* self) {
    auto* log = static_cast<HostLog*>(self);
    std::lock_guard lock(log->mu);
    log->seen.push_back(*log->source);
  }
};

TEST_CASE(
    "cuLaunchHostFunc runs in stream order, after the work before it and before the work after it",
    "[stream]") {
  const Kernels& k = kernels();
  Stream s(CU_STREAM_NON_BLOCKING);
  DeviceBuffer x(4);
  Pinned staging(4);
  HostLog log;
  log.source = staging.words();
  StreamLatch latch;
  CU_OK(latch.hold(s.s));
  CU_OK(cuMemsetD32Async(x.get(), 5, 1, s.s));
  for (std::uint32_t j = 1; j <= 3; ++j) {
    CU_OK(cuMemcpyDtoHAsync(staging.p, x.get(), 4, s.s));
    CU_OK(cuLaunchHostFunc(s.s, &HostLog::record, &log));
    CU_OK(launch(k.affine, 1, 1, s.s, x.get(), j, 1));
  }
  CHECK(log.seen.empty());
  latch.open();
  CU_OK(cuStreamSynchronize(s.s));
  std::uint32_t v1 = 5, v2 = v1 * 3 + 1, v3 = v2 * 3 + 2;
  CHECK(log.seen == std::vector<std::uint32_t>{v1, v2, v3});
}

TEST_CASE("an operation on the legacy stream waits for work submitted earlier to blocking streams",
          "[stream]") {
  use_device0();
  Stream blocking(0);
  DeviceBuffer x(4), y(4);
  CU_OK(cuMemsetD32(x.get(), 1, 1));
  CU_OK(cuMemsetD32(y.get(), 0, 1));
  StreamLatch latch;
  CU_OK(latch.hold(blocking.s));
  CU_OK(cuMemsetD32Async(x.get(), 7, 1, blocking.s));
  CU_OK(cuMemcpyDtoDAsync(y.get(), x.get(), 4, nullptr));  // legacy stream: after the memset
  CHECK(cu(cuStreamQuery(nullptr)) == "CUDA_ERROR_NOT_READY");
  latch.open();
  CU_OK(cuStreamSynchronize(nullptr));
  CHECK(read_u32(y.get(), 1)[0] == 7);
}

TEST_CASE("work submitted to a blocking stream after a legacy-stream operation waits for it",
          "[stream]") {
  use_device0();
  Stream blocking(0);
  DeviceBuffer x(4);
  CU_OK(cuMemsetD32(x.get(), 1, 1));
  StreamLatch latch;
  CU_OK(latch.hold(CU_STREAM_LEGACY));
  CU_OK(cuMemsetD32Async(x.get(), 2, 1, CU_STREAM_LEGACY));
  CU_OK(cuMemsetD32Async(x.get(), 3, 1, blocking.s));  // must land after the legacy memset
  CHECK(cu(cuStreamQuery(blocking.s)) == "CUDA_ERROR_NOT_READY");
  latch.open();
  CU_OK(cuStreamSynchronize(blocking.s));
  CHECK(read_u32(x.get(), 1)[0] == 3);
}

TEST_CASE("non-blocking streams and the legacy stream do not wait for each other", "[stream]") {
  use_device0();
  Stream nonblocking(CU_STREAM_NON_BLOCKING);
  DeviceBuffer x(4), y(4);
  {
    StreamLatch latch;
    CU_OK(latch.hold(nonblocking.s));
    CU_OK(cuMemsetD32Async(x.get(), 4, 1, nullptr));
    CU_OK(cuStreamSynchronize(nullptr));  // would hang if the legacy stream waited for it
    CHECK(cu(cuStreamQuery(nonblocking.s)) == "CUDA_ERROR_NOT_READY");
  }
  CU_OK(cuStreamSynchronize(nonblocking.s));
  {
    StreamLatch latch;
    CU_OK(latch.hold(nullptr));
    CU_OK(cuMemsetD32Async(y.get(), 5, 1, nonblocking.s));
    CU_OK(cuStreamSynchronize(nonblocking.s));  // would hang if it waited for the legacy stream
    CHECK(cu(cuStreamQuery(nullptr)) == "CUDA_ERROR_NOT_READY");
  }
  CU_OK(cuStreamSynchronize(nullptr));
  CHECK(read_u32(x.get(), 1)[0] == 4);
  CHECK(read_u32(y.get(), 1)[0] == 5);
}

TEST_CASE("each thread has its own per-thread default stream (CU_STREAM_PER_THREAD)", "[stream]") {
  const Kernels& k = kernels();
  unsigned long long id_main = 0, id_other = 0;
  CU_OK(cuStreamGetId(CU_STREAM_PER_THREAD, &id_main));
  DeviceBuffer x(4);
  CU_OK(cuMemsetD32(x.get(), 0, 1));
  StreamLatch latch;
  CU_OK(latch.hold(CU_STREAM_PER_THREAD));  // this thread's stream is held...
  std::string other_query, other_sync;
  std::thread([&] {
    cuCtxSetCurrent(primary_context(0));
    cuStreamGetId(CU_STREAM_PER_THREAD, &id_other);
    cuMemsetD32Async(x.get(), 9, 1, CU_STREAM_PER_THREAD);  // ...the other thread's is not
    other_sync = cu(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    other_query = cu(cuStreamQuery(CU_STREAM_PER_THREAD));
  }).join();
  CHECK(id_main != id_other);
  CHECK(other_sync == "CUDA_SUCCESS");
  CHECK(other_query == "CUDA_SUCCESS");
  CHECK(cu(cuStreamQuery(CU_STREAM_PER_THREAD)) == "CUDA_ERROR_NOT_READY");
  CU_OK(launch(k.affine, 1, 1, CU_STREAM_PER_THREAD, x.get(), 1u, 1));
  latch.open();
  CU_OK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
  CHECK(read_u32(x.get(), 1)[0] == 9 * 3 + 1);
}

TEST_CASE("events record a point in a stream: query, synchronize and elapsed time", "[stream]") {
  use_device0();
  Stream s(CU_STREAM_NON_BLOCKING);
  CUevent start, end, never;
  CU_OK(cuEventCreate(&start, CU_EVENT_DEFAULT));
  CU_OK(cuEventCreate(&end, CU_EVENT_DEFAULT));
  CU_OK(cuEventCreate(&never, CU_EVENT_DEFAULT));
  CU_OK(cuEventQuery(never));  // an event never recorded is complete
  float ms = -1;
  CHECK(cu(cuEventElapsedTime(&ms, start, never)) == "CUDA_ERROR_INVALID_HANDLE");

  CU_OK(cuEventRecord(start, s.s));
  StreamLatch latch;
  CU_OK(latch.hold(s.s));
  CU_OK(cuEventRecord(end, s.s));
  CU_OK(cuEventSynchronize(start));
  CU_OK(cuEventQuery(start));
  CHECK(cu(cuEventQuery(end)) == "CUDA_ERROR_NOT_READY");
  CHECK(cu(cuEventElapsedTime(&ms, start, end)) == "CUDA_ERROR_NOT_READY");
  std::string result;
  {
    Background sync([&] {
      cuCtxSetCurrent(primary_context(0));
      result = cu(cuEventSynchronize(end));
    });
    CHECK_FALSE(sync.wait_for(300));
    latch.open();
    CHECK(sync.wait_for(10000));
  }
  CHECK(result == "CUDA_SUCCESS");
  CU_OK(cuEventQuery(end));
  CU_OK(cuEventElapsedTime(&ms, start, end));
  CHECK(ms >= 0.0f);
  for (CUevent e : {start, end, never}) CU_OK(cuEventDestroy(e));
}

TEST_CASE("elapsed time of events created with CU_EVENT_DISABLE_TIMING is an error", "[stream]") {
  use_device0();
  CUevent a, b;
  CU_OK(cuEventCreate(&a, CU_EVENT_DISABLE_TIMING));
  CU_OK(cuEventCreate(&b, CU_EVENT_DISABLE_TIMING));
  CU_OK(cuEventRecord(a, nullptr));
  CU_OK(cuEventRecord(b, nullptr));
  CU_OK(cuEventSynchronize(b));
  float ms = 0;
  CHECK(cu(cuEventElapsedTime(&ms, a, b)) == "CUDA_ERROR_INVALID_HANDLE");
  CU_OK(cuEventDestroy(a));
  CU_OK(cuEventDestroy(b));
}

TEST_CASE("streams report their flags, priority and context", "[stream]") {
  use_device0();
  CUstream s;
  CU_OK(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, -1));
  unsigned flags = 0;
  CU_OK(cuStreamGetFlags(s, &flags));
  CHECK(flags == CU_STREAM_NON_BLOCKING);
  int least = 0, greatest = 0, priority = 0;
  CU_OK(cuCtxGetStreamPriorityRange(&least, &greatest));
  CU_OK(cuStreamGetPriority(s, &priority));
  CHECK(priority <= least);
  CHECK(priority >= greatest);
  CUcontext ctx = nullptr;
  CU_OK(cuStreamGetCtx(s, &ctx));
  CHECK(ctx == primary_context(0));
  CU_OK(cuStreamDestroy(s));
  CHECK(cu(cuStreamCreate(&s, 0x40)) == "CUDA_ERROR_INVALID_VALUE");
}

TEST_CASE("destroying a stream that still has work returns at once, and the work still runs",
          "[stream]") {
  use_device0();
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  DeviceBuffer x(4);
  CU_OK(cuMemsetD32(x.get(), 0, 1));
  StreamLatch latch;
  CU_OK(latch.hold(s));
  CU_OK(cuMemsetD32Async(x.get(), 6, 1, s));
  std::string result;
  {
    Background destroy([&] {
      cuCtxSetCurrent(primary_context(0));
      result = cu(cuStreamDestroy(s));
    });
    // The documented behaviour: "the function will return immediately"; a generous bound.
    CHECK(destroy.wait_for(5000));
    latch.open();
  }
  CHECK(result == "CUDA_SUCCESS");
  CU_OK(cuCtxSynchronize());
  CHECK(read_u32(x.get(), 1)[0] == 6);
}

}  // namespace
}  // namespace fid
