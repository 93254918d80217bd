// Write tracking (interpose/launch.cpp, Note [Write tracking]): after a new checkpoint epoch, a
// launch, copy or memset marks exactly the regions it may write, as regions() reports them.
// The GCR_TRACK=speculative cases run in this process (under gcr with the default mode); the
// other modes in a child started with GCR_TRACK set.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <map>

#include "common.h"

namespace ipt {
namespace {

constexpr std::uint64_t kBytes = 2ull << 20;  // above GCR_SMALL_BYTES: a region each
constexpr int kWords = static_cast<int>(kBytes / 4);

// Three buffers in regions of their own, and a control session with this process.
class Tracked {
 public:
  Tracked() : client_(start_and_connect()) {
    for (CUdeviceptr* p : {&a, &b, &c}) {
      CU_OK(cuMemAlloc(p, kBytes));
      CU_OK(cuMemsetD32(*p, 1, kWords));
    }
    CU_OK(cuCtxSynchronize());
    auto s = client_.status();
    REQUIRE(s);
    REQUIRE_FALSE(s->conservative);
  }
  ~Tracked() {
    for (CUdeviceptr p : {a, b, c}) cuMemFree(p);
    (void)client_.close();
  }

  // A new epoch: every region clean.
  void new_epoch() {
    REQUIRE(client_.new_epoch("track-" + std::to_string(++epochs_)));
    for (CUdeviceptr p : {a, b, c}) REQUIRE_FALSE(dirty(p));
  }
  bool dirty(CUdeviceptr p) {
    auto regions = client_.regions();
    REQUIRE(regions);
    const control::RegionRecord* r = region_holding(*regions, p, kBytes);
    REQUIRE(r != nullptr);
    return (r->flags & control::kRegionDirty) != 0;
  }
  // "a", "b", "c" for the dirty buffers, in order.
  std::string dirty_set() {
    std::string s;
    if (dirty(a)) s += "a";
    if (dirty(b)) s += "b";
    if (dirty(c)) s += "c";
    return s.empty() ? "none" : s;
  }

  CUdeviceptr a = 0, b = 0, c = 0;

 private:
  // The agent thread starts at cuInit: load the kernels (and so initialise CUDA) first.
  static control::Client start_and_connect() {
    kernels();
    return connect(getpid());
  }

  control::Client client_;
  int epochs_ = 0;
};

TEST_CASE("a struct parameter holding a device pointer marks that pointer's region", "[track]") {
  require_under_gcr();
  Tracked t;
  t.new_epoch();
  ProbeStructArgs args{reinterpret_cast<unsigned*>(t.b), 7u, 0u, 0x1234ull};
  CU_OK(launch(kernels().with_struct, kWords, nullptr, kWords, args));
  CU_OK(cuCtxSynchronize());
  CHECK(t.dirty_set() == "b");
}

TEST_CASE("cuLaunchKernelEx marks what cuLaunchKernel marks", "[track]") {
  require_under_gcr();
  Tracked t;
  t.new_epoch();
  CUlaunchConfig config{};
  config.gridDimX = kWords / 128;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 128;
  config.blockDimY = config.blockDimZ = 1;
  int n = kWords;
  void* params[] = {&t.b, &t.c, &n};
  CU_OK(cuLaunchKernelEx(&config, kernels().copy, params, nullptr));
  CU_OK(cuCtxSynchronize());
  CHECK(t.dirty_set() == "b");
}

TEST_CASE("a const pointer parameter of a C++ kernel is a read; the written one is marked",
          "[track]") {
  require_under_gcr();
  Tracked t;
  t.new_epoch();
  CU_OK(launch(kernels().copy, kWords, nullptr, t.a, t.b,
               kWords));  // probe_copy(unsigned*, const unsigned*, int)
  CU_OK(cuCtxSynchronize());
  CHECK(t.dirty_set() == "a");

  // The same through the packed parameter buffer (CU_LAUNCH_PARAM_BUFFER_POINTER).
  t.new_epoch();
  struct {
    CUdeviceptr dst, src;
    int n;
  } packed{t.c, t.a, kWords};
  std::size_t size = sizeof packed;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  CU_OK(cuLaunchKernel(kernels().copy, kWords / 128, 1, 1, 128, 1, 1, 0, nullptr, nullptr, extra));
  CU_OK(cuCtxSynchronize());
  CHECK(t.dirty_set() == "c");
}

TEST_CASE("an extern \"C\" kernel's pointer parameters all count as writes", "[track]") {
  require_under_gcr();
  Tracked t;
  t.new_epoch();
  CU_OK(launch(kernels().c_copy, kWords, nullptr, t.a, t.b, kWords));
  CU_OK(cuCtxSynchronize());
  CHECK(t.dirty_set() == "ab");
}

TEST_CASE("a kernel without pointer parameters marks nothing", "[track]") {
  require_under_gcr();
  Tracked t;
  t.new_epoch();
  CU_OK(launch(kernels().nop, 1, nullptr, 1, 0x5eedull));
  CU_OK(cuCtxSynchronize());
  CHECK(t.dirty_set() == "none");
}

TEST_CASE("copies and memsets mark exactly their destination's region", "[track]") {
  require_under_gcr();
  Tracked t;
  std::vector<unsigned> host(1024, 9u);

  t.new_epoch();
  CU_OK(cuMemcpyHtoD(t.b + 4096, host.data(), host.size() * 4));
  CHECK(t.dirty_set() == "b");

  t.new_epoch();
  CU_OK(cuMemsetD32(t.c, 3u, 1024));
  CHECK(t.dirty_set() == "c");

  t.new_epoch();
  CU_OK(cuMemcpyDtoD(t.a, t.c, 4096));  // reads c, writes a
  CHECK(t.dirty_set() == "a");

  t.new_epoch();
  CU_OK(cuMemcpyDtoH(host.data(), t.a, 4096));  // writes the host only
  CHECK(t.dirty_set() == "none");

  t.new_epoch();
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CU_OK(cuMemsetD32Async(t.b, 4u, 16, s));
  CU_OK(cuMemcpyHtoDAsync(t.c, host.data(), 64, s));
  CU_OK(cuStreamSynchronize(s));
  CU_OK(cuStreamDestroy(s));
  CHECK(t.dirty_set() == "bc");

  // The per-thread default stream variants, as cudart built with --default-stream per-thread
  // calls them.
  t.new_epoch();
  auto memset_ptsz = reinterpret_cast<CUresult (*)(CUdeviceptr, unsigned, size_t, CUstream)>(
      dlsym(RTLD_DEFAULT, "cuMemsetD32Async_ptsz"));
  auto sync_ptsz =
      reinterpret_cast<CUresult (*)(CUstream)>(dlsym(RTLD_DEFAULT, "cuStreamSynchronize_ptsz"));
  REQUIRE((memset_ptsz && sync_ptsz));
  CU_OK(memset_ptsz(t.a, 6u, 16, CU_STREAM_PER_THREAD));
  CU_OK(sync_ptsz(CU_STREAM_PER_THREAD));
  CHECK(t.dirty_set() == "a");
}

// Entry points the rule makes gcr wrap (Note [What may pass the gate unwrapped]) although simgpu
// has no CUDA arrays: the mark comes before the driver's answer, so a copy the driver refuses
// still marks its destination (a wasted copy at the next checkpoint, never a missed one).
TEST_CASE("a copy out of a CUDA array marks its destination; one into an array marks nothing",
          "[track]") {
  require_under_gcr();
  Tracked t;
  t.new_epoch();
  (void)cuMemcpyAtoD(t.b, nullptr, 0, 4096);
  CHECK(t.dirty_set() == "b");
  t.new_epoch();
  (void)cuMemcpyDtoA(nullptr, 0, t.c, 4096);
  CHECK(t.dirty_set() == "none");
}

// The track child (buffers a, b, c from cuMemAlloc, d its own VMM mapping) under `env`: after a
// new epoch, `command`'s launch leaves the buffers `want_dirty` dirty ("none" for none).
void check_child_tracking(const std::vector<std::string>& env, const std::string& command,
                          const std::string& want_dirty, bool want_conservative) {
  Child child = Child::mode({"track"}, gcr_env(env));
  std::vector<std::string> lines;
  REQUIRE(child.read_until("ready", 30000, &lines));
  std::map<std::string, PrintedPtr> ptr;
  for (auto& l : lines)
    if (auto p = parse_ptr(l)) ptr[p->label] = *p;
  REQUIRE(ptr.size() == 4);
  control::Client client = connect(child.pid());
  auto status = client.status();
  REQUIRE(status);
  CHECK(status->conservative == want_conservative);
  REQUIRE(client.new_epoch("child-epoch"));
  auto dirty_set = [&] {
    auto regions = client.regions();
    REQUIRE(regions);
    std::string s;
    for (const char* label : {"a", "b", "c", "d"}) {
      const control::RegionRecord* r =
          region_holding(*regions, ptr[label].address, ptr[label].bytes);
      INFO("buffer " << label);
      REQUIRE(r != nullptr);
      if (r->flags & control::kRegionDirty) s += label;
    }
    return s.empty() ? std::string("none") : s;
  };
  std::string before = dirty_set();
  child.send(command);
  REQUIRE(child.read_until("done"));
  std::string after = dirty_set();
  REQUIRE(client.close());
  child.send("exit");
  CHECK(describe_status(child.wait()) == "exit 0");
  if (want_dirty.find_first_of("abc") != std::string::npos || want_dirty == "none")
    CHECK(before == "none");
  CHECK(after == want_dirty);
}

TEST_CASE("GCR_TRACK=conservative marks every region at any launch", "[track]") {
  check_child_tracking({"GCR_TRACK=conservative"}, "nop", "abcd", true);
}

TEST_CASE("GCR_TRACK=precise counts const pointer parameters as writes", "[track]") {
  check_child_tracking({"GCR_TRACK=precise"}, "copy", "ab", false);
}

TEST_CASE("in a child under the default mode a copy marks its destination only", "[track]") {
  check_child_tracking({}, "copy", "a", false);
}

TEST_CASE("a launch writing the program's own VMM mapping marks that mapping's region", "[track]") {
  check_child_tracking({}, "fill-d", "d", false);
}

// With the arena full, the program's cuMemAddressReserve gets an address from the driver, outside
// the arena, where launches cannot be traced to a region: such a region must count as written
// always, or an incremental checkpoint would keep stale data.
TEST_CASE("a region outside gcr's address arena is always reported dirty", "[track]") {
  check_child_tracking({"GCR_ARENA_BYTES=8M"}, "fill-d", "d", false);
  check_child_tracking({"GCR_ARENA_BYTES=8M"}, "nop", "d", false);
}

// Note [Host memory tracked between checkpoints] (daemon/host_tracking.h): a device
// writes registered host memory by DMA, past write protection, so gcrd must know of it.
TEST_CASE("host memory registered with the driver stays reported in the status", "[track]") {
  require_under_gcr();
  kernels();
  control::Client client = connect(getpid());
  auto before = client.status();
  REQUIRE(before);
  CHECK_FALSE(before->host_registered);
  constexpr std::size_t kHostBytes = 64 << 10;
  void* host = std::aligned_alloc(4096, kHostBytes);
  REQUIRE(host != nullptr);
  CU_OK(cuMemHostRegister(host, kHostBytes, 0));
  auto registered = client.status();
  REQUIRE(registered);
  CHECK(registered->host_registered);
  CU_OK(cuMemHostUnregister(host));
  std::free(host);
  auto after = client.status();
  REQUIRE(after);
  CHECK(after->host_registered);  // what a device wrote before may still be unseen
  (void)client.close();
}

// Protocol 1.4: where the program pinned host memory, so that gcrd takes those pages from the
// process at every checkpoint: allocated ranges until freed, registered ones for good.
TEST_CASE("host memory pinned through the driver is listed by host_dma", "[track]") {
  require_under_gcr();
  kernels();
  control::Client client = connect(getpid());
  auto listed = [&](const void* p, std::uint64_t bytes) {
    auto dma = client.host_dma();
    REQUIRE(dma);
    CHECK_FALSE(dma->overflow);
    for (const control::HostDmaRange& r : dma->ranges)
      if (r.address == reinterpret_cast<std::uint64_t>(p) && r.bytes >= bytes) return true;
    return false;
  };
  constexpr std::size_t kBytes = 256 << 10;
  void* allocated = nullptr;
  CU_OK(cuMemHostAlloc(&allocated, kBytes, CU_MEMHOSTALLOC_PORTABLE));
  void* allocated_host = nullptr;
  CU_OK(cuMemAllocHost(&allocated_host, kBytes));
  CHECK(listed(allocated, kBytes));
  CHECK(listed(allocated_host, kBytes));
  CU_OK(cuMemFreeHost(allocated));
  CHECK_FALSE(listed(allocated, kBytes));  // unmapped: what comes there later is new memory
  CHECK(listed(allocated_host, kBytes));
  CU_OK(cuMemFreeHost(allocated_host));

  void* own = std::aligned_alloc(4096, kBytes);
  REQUIRE(own != nullptr);
  CU_OK(cuMemHostRegister(own, kBytes, 0));
  CHECK(listed(own, kBytes));
  CU_OK(cuMemHostUnregister(own));
  CHECK(listed(own, kBytes));  // still mapped, with what a device may have written before
  std::free(own);
  (void)client.close();
}

}  // namespace
}  // namespace ipt
