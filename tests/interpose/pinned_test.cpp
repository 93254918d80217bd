// Note [Device writes to pinned host memory] (interpose/pinned.h): before it enqueues a device
// operation that may write pinned host memory, the interposer writes each page itself, from the
// calling thread, so that write protection sees it before the device gets there. The test holds
// a userfaultfd on a pinned buffer, as CRIU and gcrd do, and looks at who faulted and when: the
// operations wait on a flag the test has not set yet, so every fault seen before the flag is the
// interposer's. On simgpu the device's own write is a CPU write (it would fault too, but only
// once the stream runs); on a GPU it is DMA, which no fault announces.
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "common.h"

namespace ipt {
namespace {

constexpr std::size_t kPage = 4096;

// A userfaultfd write-protecting [base, base + bytes) of this process; a thread records the page
// and the thread of every fault and lifts that page's protection, as gcrd's tracking does.
class Protector {
 public:
  Protector(void* base, std::size_t bytes)
      : base_(reinterpret_cast<std::uint64_t>(base)), bytes_(bytes) {
    // Faults taken in the kernel too (the interposer's MADV_POPULATE_WRITE), as CRIU's
    // userfaultfd from /dev/userfaultfd serves them.
    fd_ = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
    if (fd_ < 0) {
      std::printf("pinned: skipped, no userfaultfd that serves kernel faults here: %s\n",
                  std::strerror(errno));
      return;
    }
    uffdio_api api{};
    api.api = UFFD_API;
    api.features = UFFD_FEATURE_PAGEFAULT_FLAG_WP | UFFD_FEATURE_THREAD_ID;
    if (::ioctl(fd_, UFFDIO_API, &api) != 0) {
      std::printf("pinned: skipped, userfaultfd without write protection here\n");
      ::close(fd_);
      fd_ = -1;
      return;
    }
    uffdio_register reg{};
    reg.range.start = base_;
    reg.range.len = bytes_;
    reg.mode = UFFDIO_REGISTER_MODE_WP;
    REQUIRE(::ioctl(fd_, UFFDIO_REGISTER, &reg) == 0);
    thread_ = std::thread([this] { serve(); });
  }
  ~Protector() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return fd_ >= 0; }

  void protect() {
    std::memset(reinterpret_cast<void*>(base_), 0x5a, bytes_);  // present: protection sticks
    uffdio_writeprotect wp{};
    wp.range.start = base_;
    wp.range.len = bytes_;
    wp.mode = UFFDIO_WRITEPROTECT_MODE_WP;
    REQUIRE(::ioctl(fd_, UFFDIO_WRITEPROTECT, &wp) == 0);
    std::lock_guard lock(mu_);
    faults_.clear();
  }
  // Page indexes that faulted, by the faulting thread.
  std::set<std::size_t> pages_faulted_by(pid_t tid) {
    std::lock_guard lock(mu_);
    std::set<std::size_t> out;
    for (auto [page, who] : faults_)
      if (who == tid) out.insert(page);
    return out;
  }
  std::size_t faults() {
    std::lock_guard lock(mu_);
    return faults_.size();
  }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      uffd_msg msg{};
      if (::read(fd_, &msg, sizeof msg) != sizeof msg || msg.event != UFFD_EVENT_PAGEFAULT)
        continue;
      std::uint64_t page = msg.arg.pagefault.address & ~(kPage - 1);
      {
        std::lock_guard lock(mu_);
        faults_.insert({(page - base_) / kPage, static_cast<pid_t>(msg.arg.pagefault.feat.ptid)});
      }
      uffdio_writeprotect wp{};
      wp.range.start = page;
      wp.range.len = kPage;
      wp.mode = 0;  // lifts and wakes
      ::ioctl(fd_, UFFDIO_WRITEPROTECT, &wp);
    }
  }

  std::uint64_t base_;
  std::size_t bytes_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::set<std::pair<std::size_t, pid_t>> faults_;
};

std::set<std::size_t> page_span(std::size_t first, std::size_t count) {
  std::set<std::size_t> s;
  for (std::size_t i = first; i < first + count; ++i) s.insert(i);
  return s;
}

// Pinned memory, a flag the streams wait on, and a device buffer to copy from.
struct Setup {
  Setup() {
    use_device();
    kernels();
    void* p = nullptr;
    CU_OK(cuMemHostAlloc(&p, kBytes, CU_MEMHOSTALLOC_DEVICEMAP));
    pinned = static_cast<unsigned char*>(p);
    CU_OK(cuMemAllocHost(&p, kPage));
    flag = static_cast<unsigned*>(p);
    *flag = 0;
    CU_OK(cuMemAlloc(&device, kBytes));
    CU_OK(cuMemsetD8(device, 0xc3, kBytes));
    CU_OK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CU_OK(cuCtxSynchronize());
  }
  ~Setup() {
    cuCtxSynchronize();
    cuStreamDestroy(stream);
    cuMemFree(device);
    cuMemFreeHost(flag);
    cuMemFreeHost(pinned);
  }
  // Holds the stream until release().
  void hold() {
    *flag = 0;
    CU_OK(cuStreamWaitValue32(stream, reinterpret_cast<CUdeviceptr>(flag), 1,
                              CU_STREAM_WAIT_VALUE_GEQ));
  }
  void release() {
    __atomic_store_n(flag, 1u, __ATOMIC_RELEASE);
    CU_OK(cuStreamSynchronize(stream));
  }
  // Park, a new epoch and unpark through the control socket, as a checkpoint does: the epoch
  // arms every range.
  static void checkpoint_cycle() {
    control::Client client = connect(getpid());
    REQUIRE(client.quiesce(std::chrono::seconds(10)));
    auto parked = client.park();
    REQUIRE(parked);
    REQUIRE(client.new_epoch("pinned-test"));
    REQUIRE(client.unpark(*parked));
    REQUIRE(client.resume());
    REQUIRE(client.close());
  }

  static constexpr std::size_t kBytes = 16 * kPage + 100;  // a partial last page
  unsigned char* pinned = nullptr;
  unsigned* flag = nullptr;
  CUdeviceptr device = 0;
  CUstream stream = nullptr;
};

TEST_CASE("a copy into pinned memory writes its pages from the caller before the device can",
          "[pinned]") {
  require_under_gcr();
  Setup s;
  Setup::checkpoint_cycle();
  Protector uffd(s.pinned, 17 * kPage);
  if (!uffd.ok()) return;
  uffd.protect();
  const pid_t me = static_cast<pid_t>(::gettid());

  // Pages 3..5 (the copy starts mid-page 3 and ends mid-page 5).
  s.hold();
  CU_OK(cuMemcpyDtoHAsync(s.pinned + 3 * kPage + 10, s.device, 2 * kPage, s.stream));
  CHECK(uffd.pages_faulted_by(me) == page_span(3, 3));
  CHECK(uffd.faults() == 3);
  s.release();
  CHECK(s.pinned[3 * kPage + 10] == 0xc3);
  CHECK(s.pinned[5 * kPage + 9] == 0xc3);
  CHECK(s.pinned[5 * kPage + 10] == 0x5a);  // past the copy: untouched by anyone
  CHECK(s.pinned[3 * kPage + 9] == 0x5a);

  // A memset through the unified address, a 2D copy into host memory.
  s.hold();
  CU_OK(
      cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(s.pinned) + 8 * kPage, 0x11, kPage, s.stream));
  CUDA_MEMCPY2D c{};
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = s.device;
  c.srcPitch = 64;
  c.dstMemoryType = CU_MEMORYTYPE_HOST;
  c.dstHost = s.pinned + 10 * kPage;
  c.dstPitch = kPage;  // one row in each of pages 10..12
  c.WidthInBytes = 64;
  c.Height = 3;
  CU_OK(cuMemcpy2DAsync(&c, s.stream));
  CHECK(uffd.pages_faulted_by(me) == [] {
    auto want = page_span(3, 3);
    want.merge(page_span(8, 1));
    want.merge(page_span(10, 3));
    return want;
  }());
  s.release();
  CHECK(s.pinned[8 * kPage] == 0x11);
  CHECK(s.pinned[12 * kPage + 63] == 0xc3);
}

TEST_CASE("a kernel given a pointer into pinned memory has the whole allocation written first",
          "[pinned]") {
  require_under_gcr();
  Setup s;
  Setup::checkpoint_cycle();
  Protector uffd(s.pinned, 17 * kPage);
  if (!uffd.ok()) return;
  uffd.protect();
  const pid_t me = static_cast<pid_t>(::gettid());
  s.hold();
  // It writes 4 words at page 7; gcr cannot know how far it reaches.
  CU_OK(launch(kernels().fill, 4, s.stream, reinterpret_cast<unsigned*>(s.pinned + 7 * kPage), 9u,
               4));
  CHECK(uffd.pages_faulted_by(me) == page_span(0, 17));
  s.release();
  CHECK(reinterpret_cast<unsigned*>(s.pinned + 7 * kPage)[0] == probe_word(9, 0));

  // Written once per cut: the same launch again finds every page done, and the process writes
  // none of them (a page protected since is the test's doing, and faults when the device writes).
  uffd.protect();
  s.hold();
  CU_OK(launch(kernels().fill, 4, s.stream, reinterpret_cast<unsigned*>(s.pinned + 7 * kPage), 9u,
               4));
  CHECK(uffd.pages_faulted_by(me).empty());
  s.release();

  // The next cut arms it again.
  Setup::checkpoint_cycle();
  uffd.protect();
  s.hold();
  CU_OK(cuMemcpyDtoHAsync(s.pinned + kPage, s.device, 4, s.stream));
  CHECK(uffd.pages_faulted_by(me) == page_span(1, 1));
  s.release();
}

TEST_CASE("memory registered read-only is never written by gcr", "[pinned]") {
  require_under_gcr();
  Setup s;
  void* ro = mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(ro != MAP_FAILED);
  CU_OK(cuMemHostRegister(ro, 4 * kPage, CU_MEMHOSTREGISTER_READ_ONLY));
  Setup::checkpoint_cycle();
  {
    Protector uffd(ro, 4 * kPage);
    if (!uffd.ok()) return;
    uffd.protect();
    s.hold();
    CU_OK(cuMemcpyHtoDAsync(s.device, ro, 4 * kPage, s.stream));
    // Both of an extern "C" kernel's pointers count as written; a device only reads this one.
    CU_OK(launch(kernels().c_copy, 64, s.stream, reinterpret_cast<unsigned*>(s.device),
                 static_cast<const unsigned*>(ro), 64));
    s.release();
    CHECK(uffd.faults() == 0);
  }
  CU_OK(cuMemHostUnregister(ro));
  munmap(ro, 4 * kPage);
}

// Note [Pinned host memory is gcr's] (interpose/host_alloc.cpp): gcr allocates pinned memory and
// registers it with the driver; with GCR_PARK_PINNED=1 a park unregisters it, the program's own
// registrations too, and unpark registers them again (ctest's interpose.pinned_park); by default
// they stay registered. The driver is asked directly (simgpu, past the interposer).
TEST_CASE(
    "a park leaves the driver no pinned host memory (GCR_PARK_PINNED=1), and unpark gives "
    "it back",
    "[pinned][pinned_park]") {
  require_under_gcr();
  const char* park_env = std::getenv("GCR_PARK_PINNED");
  const bool parks = park_env && std::string(park_env) == "1";
  const CUresult while_parked = parks ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
  Setup s;
  // The interposer's dlopen hands itself out for the driver: find simgpu among the loaded objects.
  void* lib = nullptr;
  struct link_map* map = nullptr;
  REQUIRE(dlinfo(dlopen(nullptr, RTLD_NOW), RTLD_DI_LINKMAP, &map) == 0);
  for (; map && !lib; map = map->l_next)
    if (map->l_name && std::string(map->l_name) == simgpu_path()) lib = map;
  REQUIRE(lib != nullptr);
  auto driver_flags =
      reinterpret_cast<decltype(&cuMemHostGetFlags)>(dlsym(lib, "cuMemHostGetFlags"));
  REQUIRE(driver_flags != nullptr);
  void* own = mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(own != MAP_FAILED);
  CU_OK(cuMemHostRegister(own, 4 * kPage, CU_MEMHOSTREGISTER_PORTABLE));

  unsigned flags = 0;
  CU_OK(cuMemHostGetFlags(&flags, s.pinned));
  CHECK(flags == CU_MEMHOSTALLOC_DEVICEMAP);  // what the program asked for
  CHECK(driver_flags(&flags, s.pinned) == CUDA_SUCCESS);
  CHECK(cuMemHostUnregister(s.pinned) == CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);  // not its own

  control::Client client = connect(getpid());
  REQUIRE(client.quiesce(std::chrono::seconds(10)));
  auto parked = client.park();
  REQUIRE(parked);
  CHECK(driver_flags(&flags, s.pinned) == while_parked);
  CHECK(driver_flags(&flags, s.flag) == while_parked);
  CHECK(driver_flags(&flags, own) == while_parked);
  s.pinned[100] = 7;  // the program's threads go on using it meanwhile
  REQUIRE(client.unpark(*parked));
  REQUIRE(client.resume());
  REQUIRE(client.close());
  CHECK(driver_flags(&flags, s.pinned) == CUDA_SUCCESS);
  CHECK(driver_flags(&flags, own) == CUDA_SUCCESS);
  CHECK(flags == CU_MEMHOSTREGISTER_PORTABLE);

  // Devices reach it as before: a copy into it and a kernel through its mapped pointer.
  CU_OK(cuMemcpyDtoH(s.pinned + kPage, s.device, 64));
  CHECK(s.pinned[kPage] == 0xc3);
  CHECK(s.pinned[100] == 7);
  CUdeviceptr mapped = 0;
  CU_OK(cuMemHostGetDevicePointer(&mapped, s.pinned, 0));
  CU_OK(launch(kernels().fill, 4, nullptr, reinterpret_cast<unsigned*>(mapped + 2 * kPage), 5u, 4));
  CU_OK(cuCtxSynchronize());
  CHECK(reinterpret_cast<unsigned*>(s.pinned + 2 * kPage)[3] == probe_word(5, 3));
  CU_OK(cuMemHostUnregister(own));
  CHECK(driver_flags(&flags, own) == CUDA_ERROR_INVALID_VALUE);
  munmap(own, 4 * kPage);
}

// Last: it leaves this process unable to vouch for its pinned memory, for good.
TEST_CASE(
    "an operation gcr cannot see into writes every armed page, and the process then asks "
    "gcrd for the old care",
    "[pinned]") {
  require_under_gcr();
  Setup s;
  {
    control::Client client = connect(getpid());
    auto dma = client.host_dma();
    REQUIRE(dma);
    CHECK(dma->touched);
  }
  Setup::checkpoint_cycle();
  Protector uffd(s.pinned, 17 * kPage);
  if (!uffd.ok()) return;
  uffd.protect();
  const pid_t me = static_cast<pid_t>(::gettid());
  s.hold();
  CUstreamBatchMemOpParams op{};
  op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  op.writeValue.address = reinterpret_cast<CUdeviceptr>(s.flag) + 64;
  op.writeValue.value = 1;
  CU_OK(cuStreamBatchMemOp(s.stream, 1, &op, 0));
  CHECK(uffd.pages_faulted_by(me) == page_span(0, 17));
  s.release();
  {
    control::Client client = connect(getpid());
    auto dma = client.host_dma();
    REQUIRE(dma);
    CHECK_FALSE(dma->touched);
    CHECK(dma->ranges.size() >= 2);
  }
  // gcrd copies it in the freeze from now on: nothing is armed after the next cut.
  Setup::checkpoint_cycle();
  uffd.protect();
  s.hold();
  CU_OK(cuMemcpyDtoHAsync(s.pinned, s.device, 64, s.stream));
  CHECK(uffd.pages_faulted_by(me).empty());
  s.release();
}

}  // namespace
}  // namespace ipt
