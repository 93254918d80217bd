// CUDA IPC (cuIpc*MemHandle, cuIpc*EventHandle) and stream memory operations across processes:
// the test process and a child (fork+exec of this program, ipc_child_modes.cpp) share a
// cuMemAlloc allocation and an interprocess event; flags set in one process release waits (a
// stream's or a spinning kernel's) in the other, and the data written before a release is seen
// after the matching acquire.
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "common.h"
#include "ipc_layout.h"

namespace fid {
namespace {

std::string handle_hex(const CUipcMemHandle& h) {
  return hex(&h, sizeof h);
}

// Reads lines until one starts with `key`; returns its value ("" on timeout, EOF, or "error").
std::string expect(Child& c, const std::string& key, int timeout_ms = 20000) {
  while (auto line = c.read_line(timeout_ms)) {
    if (line->rfind("error", 0) == 0) {
      FAIL_CHECK("child: " << *line);
      return "";
    }
    if (line->rfind(key + " ", 0) == 0) return line->substr(key.size() + 1);
    if (*line == key) return key;
  }
  FAIL_CHECK("child said nothing starting with '" << key << "'");
  return "";
}

TEST_CASE("cuIpcGetMemHandle and cuIpcOpenMemHandle refuse what the driver refuses", "[ipc]") {
  use_device0();
  DeviceBuffer d(4096);
  CUipcMemHandle h;
  CHECK(cu(cuIpcGetMemHandle(&h, d.get() + 512)) == "CUDA_ERROR_INVALID_VALUE");  // not a base
  CHECK(cu(cuIpcGetMemHandle(&h, 0x1234)) == "CUDA_ERROR_INVALID_VALUE");
  CU_OK(cuIpcGetMemHandle(&h, d.get()));
  int capable = 0;
  CU_OK(cuPointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, d.get()));
  CHECK(capable == 1);
  CUdeviceptr p = 0;
  // The process that exported a handle cannot open it.
  CHECK(cu(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) ==
        "CUDA_ERROR_INVALID_CONTEXT");
  CUipcMemHandle garbage;
  std::memset(&garbage, 0x5a, sizeof garbage);
  CHECK(cu(cuIpcOpenMemHandle(&p, garbage, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) ==
        "CUDA_ERROR_INVALID_HANDLE");
  CHECK(cu(cuIpcOpenMemHandle(&p, h, 0x10)) == "CUDA_ERROR_INVALID_VALUE");
  CHECK(cu(cuIpcCloseMemHandle(d.get())) == "CUDA_ERROR_INVALID_VALUE");  // not IPC memory
  CUevent plain, timed;
  CU_OK(cuEventCreate(&plain, CU_EVENT_DISABLE_TIMING));
  CUipcEventHandle eh;
  CHECK(cu(cuIpcGetEventHandle(&eh, plain)) == "CUDA_ERROR_INVALID_HANDLE");
  CHECK(cu(cuEventCreate(&timed, CU_EVENT_INTERPROCESS)) == "CUDA_ERROR_INVALID_VALUE");
  CUevent shared, opened;
  CU_OK(cuEventCreate(&shared, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
  CU_OK(cuIpcGetEventHandle(&eh, shared));
  CHECK(cu(cuIpcOpenEventHandle(&opened, eh)) == "CUDA_ERROR_INVALID_CONTEXT");
  CUipcEventHandle bad_event;
  std::memset(&bad_event, 0, sizeof bad_event);
  CHECK(cu(cuIpcOpenEventHandle(&opened, bad_event)) == "CUDA_ERROR_INVALID_HANDLE");
  CU_OK(cuEventDestroy(plain));
  CU_OK(cuEventDestroy(shared));
}

TEST_CASE("a handle of an exporter that has exited no longer opens", "[ipc]") {
  use_device0();
  std::string handle;
  {
    Child exporter = Child::mode({"ipc-export", "1024", "5"});
    handle = expect(exporter, "handle");
    REQUIRE(!handle.empty());
    exporter.send("exit");
    REQUIRE(exporter.wait() == 0);
  }
  CUipcMemHandle h;
  REQUIRE(unhex(handle, &h, sizeof h));
  CUdeviceptr p = 0;
  CHECK(cu(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) ==
        "CUDA_ERROR_INVALID_HANDLE");
}

TEST_CASE(
    "memory opened with cuIpcOpenMemHandle in another process shares its bytes both ways; "
    "reopening counts references",
    "[ipc]") {
  use_device0();
  const std::size_t words = 3000;  // not a whole page: the window still starts at the base
  DeviceBuffer d(words * 4);
  write_u32(d.get(), pattern_words(51, words));
  CUipcMemHandle h;
  CU_OK(cuIpcGetMemHandle(&h, d.get()));
  Child child = Child::mode({"ipc-open", handle_hex(h), std::to_string(words), "51", "52"});
  CHECK(expect(child, "seen") == "ok");
  CHECK(expect(child, "reopen") == "same");
  REQUIRE(expect(child, "written") == "written");
  CHECK(read_u32(d.get(), words) == pattern_words(52, words));
  child.send("close");
  CHECK(expect(child, "close") == "CUDA_SUCCESS");
  child.send("close");
  CHECK(expect(child, "close") == "CUDA_SUCCESS");
  child.send("close");  // both references are gone
  CHECK(expect(child, "close") == "CUDA_ERROR_INVALID_VALUE");
  child.send("exit");
  CHECK(child.wait() == 0);
}

TEST_CASE(
    "an interprocess event, stream memory operations and spinning kernels synchronise two "
    "processes",
    "[ipc]") {
  namespace L = ipc_layout;
  const Kernels& k = kernels();
  DeviceBuffer buf(L::kBytes);
  CU_OK(cuMemsetD32(buf.get(), 0, L::kBytes / 4));
  const CUdeviceptr flag32 = buf.get() + L::kFlag32, flag64 = buf.get() + L::kFlag64,
                    data = buf.get() + L::kData;
  CUipcMemHandle mh;
  CU_OK(cuIpcGetMemHandle(&mh, buf.get()));
  CUevent ev;
  CU_OK(cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
  CUipcEventHandle eh;
  CU_OK(cuIpcGetEventHandle(&eh, ev));
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  Child peer = Child::mode({"ipc-peer", handle_hex(mh), hex(&eh, sizeof eh)});
  REQUIRE(expect(peer, "opened") == "opened");

  SECTION("the peer waits for an event this process records") {
    StreamLatch latch;
    CU_OK(latch.hold(s));
    std::vector<std::uint32_t> words = pattern_words(L::kEventSeed, L::kWords);
    CU_OK(cuMemcpyHtoDAsync(data, words.data(), L::kWords * 4, s));
    CU_OK(cuEventRecord(ev, s));
    CHECK(cu(cuEventQuery(ev)) == "CUDA_ERROR_NOT_READY");
    peer.send("event");
    CHECK(expect(peer, "query") == "CUDA_ERROR_NOT_READY");
    CHECK_FALSE(peer.read_line(300));  // its stream waits for our record
    latch.open();
    CHECK(expect(peer, "event-seen") == "ok");
    CHECK(expect(peer, "query-after") == "CUDA_SUCCESS");
    CU_OK(cuEventSynchronize(ev));
  }
  SECTION("the peer's kernel spins until this process's kernel releases the flag") {
    peer.send("kernel");
    REQUIRE(expect(peer, "spinning") == "spinning");
    CHECK_FALSE(peer.read_line(300));
    CU_OK(
        launch(k.publish, 1, 1, s, data, static_cast<int>(L::kWords), L::kKernelSeed, flag32, 1u));
    CHECK(expect(peer, "kernel-seen") == "ok");
  }
  SECTION("stream memory operations order data both ways") {
    peer.send("memop");
    REQUIRE(expect(peer, "waiting") == "waiting");
    CHECK_FALSE(peer.read_line(300));
    std::vector<std::uint32_t> words = pattern_words(L::kMemopSeed, L::kWords);
    CU_OK(cuMemcpyHtoDAsync(data, words.data(), L::kWords * 4, s));
    CU_OK(cuStreamWriteValue64(s, flag64, 5, CU_STREAM_WRITE_VALUE_DEFAULT));
    CHECK(expect(peer, "memop-seen") == "ok");

    // And back: this stream waits for the peer's release, then reads what it wrote before.
    // Pinned: a copy to pageable memory would return only once it is done, as on the driver.
    void* pinned = nullptr;
    CU_OK(cuMemAllocHost(&pinned, L::kWords * 4));
    CU_OK(cuStreamWaitValue32(s, flag32, 2, CU_STREAM_WAIT_VALUE_EQ));
    CU_OK(cuMemcpyDtoHAsync(pinned, data, L::kWords * 4, s));
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    CHECK(cu(cuStreamQuery(s)) == "CUDA_ERROR_NOT_READY");
    peer.send("publish");
    CU_OK(cuStreamSynchronize(s));
    auto* got = static_cast<std::uint32_t*>(pinned);
    CHECK(std::vector<std::uint32_t>(got, got + L::kWords) ==
          pattern_words(L::kPublishSeed, L::kWords));
    CU_OK(cuMemFreeHost(pinned));
    CHECK(expect(peer, "published") == "published");
  }
  peer.send("exit");
  CHECK(peer.wait() == 0);
  CU_OK(cuStreamDestroy(s));
  CU_OK(cuEventDestroy(ev));
}

}  // namespace
}  // namespace fid
