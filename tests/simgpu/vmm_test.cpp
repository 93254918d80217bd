// Virtual memory management: reservations, physical allocations, mapping, access, and sharing an
// allocation with another process as a POSIX file descriptor.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

namespace fid {
namespace {

constexpr std::size_t kMiB = 1 << 20;
constexpr std::size_t kGranularity = 2 * kMiB;

CUmemAllocationProp device_prop(int ordinal, bool shareable = false) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, ordinal};
  if (shareable) prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

CUresult set_access(CUdeviceptr d, std::size_t size, CUmemAccess_flags flags) {
  CUmemAccessDesc desc{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, flags};
  return cuMemSetAccess(d, size, &desc, 1);
}

TEST_CASE("the VMM allocation granularity is 2 MiB", "[vmm]") {
  use_device0();
  CUmemAllocationProp prop = device_prop(0);
  size_t minimum = 0, recommended = 0;
  CU_OK(cuMemGetAllocationGranularity(&minimum, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CU_OK(cuMemGetAllocationGranularity(&recommended, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  CHECK(minimum == kGranularity);
  CHECK(recommended == kGranularity);
  CUmemGenericAllocationHandle h;
  CHECK(cu(cuMemCreate(&h, kGranularity + 4096, &prop, 0)) == "CUDA_ERROR_INVALID_VALUE");
  CUdeviceptr d;
  CHECK(cu(cuMemAddressReserve(&d, kGranularity / 2, 0, 0, 0)) == "CUDA_ERROR_INVALID_VALUE");
}

TEST_CASE("an address reservation honours the address asked for when that range is free", "[vmm]") {
  use_device0();
  const std::size_t size = 8 * kMiB;
  CUdeviceptr first = 0, again = 0, beyond = 0, clash = 0;
  CU_OK(cuMemAddressReserve(&first, size, 0, 0, 0));
  CHECK(first % kGranularity == 0);
  CU_OK(cuMemAddressFree(first, size));
  CU_OK(cuMemAddressReserve(&again, size, 0, first, 0));
  CHECK(again == first);
  const CUdeviceptr wanted = first + 64 * kMiB;
  CU_OK(cuMemAddressReserve(&beyond, size, 0, wanted, 0));
  CHECK(beyond == wanted);
  // A hint inside a taken range is only a hint: the reservation lands elsewhere.
  CU_OK(cuMemAddressReserve(&clash, size, 0, first + kGranularity, 0));
  CHECK((clash + size <= first || clash >= first + size));
  CU_OK(cuMemAddressFree(clash, size));
  CU_OK(cuMemAddressFree(beyond, size));
  CU_OK(cuMemAddressFree(again, size));
  CHECK(cu(cuMemAddressFree(again, size)) == "CUDA_ERROR_INVALID_VALUE");
}

TEST_CASE(
    "mapped VMM memory is refused to copies until cuMemSetAccess, then copies, memsets and kernels "
    "use it",
    "[vmm]") {
  const Kernels& k = kernels();
  const std::size_t size = 4 * kMiB, words = size / 4;
  CUmemAllocationProp prop = device_prop(0);
  CUmemGenericAllocationHandle h;
  CU_OK(cuMemCreate(&h, size, &prop, 0));
  CUdeviceptr d;
  CU_OK(cuMemAddressReserve(&d, size, 0, 0, 0));
  CU_OK(cuMemMap(d, size, 0, h, 0));
  std::vector<std::uint32_t> src = pattern_words(21, words);
  CHECK(cu(cuMemcpyHtoD(d, src.data(), size)) != "CUDA_SUCCESS");
  CHECK(cu(cuMemsetD32(d, 0, 16)) != "CUDA_SUCCESS");

  CU_OK(set_access(d, size, CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
  unsigned long long flags = 0;
  CUmemLocation loc{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CU_OK(cuMemGetAccess(&flags, &loc, d + kMiB));
  CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  CU_OK(cuMemcpyHtoD(d, src.data(), size));
  CHECK(read_u32(d, words) == src);
  CU_OK(cuMemsetD32(d + kMiB, 10, 256));
  CU_OK(launch(k.affine, 2, 128, nullptr, d + kMiB, 4u, 256));
  CU_OK(cuCtxSynchronize());
  std::vector<std::uint32_t> got = read_u32(d + kMiB - 4, 258);
  CHECK(got[0] == src[kMiB / 4 - 1]);
  CHECK(got[1] == 34);
  CHECK(got[256] == 34);
  CHECK(got[257] == src[kMiB / 4 + 256]);
  DeviceBuffer heap(size);
  CU_OK(cuMemcpyDtoD(heap.get(), d, size));  // VMM -> heap
  CHECK(read_u32(heap.get(), 4)[0] == src[0]);

  // Read-only now: simgpu refuses the write up front, where a GPU would fault when it ran.
  CU_OK(set_access(d, size, CU_MEM_ACCESS_FLAGS_PROT_READ));
  CHECK(cu(cuMemsetD32(d, 0, 16)) != "CUDA_SUCCESS");
  CHECK(read_u32(d, 1)[0] == src[0]);

  CU_OK(cuMemUnmap(d, size));
  CHECK(cu(cuMemcpyDtoH(got.data(), d, 16)) != "CUDA_SUCCESS");  // unmapped
  CU_OK(cuMemRelease(h));
  CU_OK(cuMemAddressFree(d, size));
}

// Note [Copies into device memory]: such copies go to the allocation's memfd, not the mapping.
TEST_CASE("a copy into part of an allocation changes exactly those bytes, pages cut anywhere",
          "[vmm]") {
  use_device0();
  CUmemAllocationProp prop = device_prop(0);
  CUmemGenericAllocationHandle h;
  CU_OK(cuMemCreate(&h, kGranularity, &prop, 0));
  CUdeviceptr d;
  CU_OK(cuMemAddressReserve(&d, kGranularity, 0, 0, 0));
  CU_OK(cuMemMap(d, kGranularity, 0, h, 0));
  CU_OK(set_access(d, kGranularity, CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
  CU_OK(cuMemsetD8(d, 0xab, 64 * 1024));  // the first 16 pages; the rest never touched
  std::vector<unsigned char> src(9000);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + 1);
  CU_OK(cuMemcpyHtoD(d + 3001, src.data(), src.size()));           // into written pages
  CU_OK(cuMemcpyHtoD(d + kGranularity - 4097, src.data(), 4097));  // untouched ones, to the end
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CU_OK(cuMemcpyHtoDAsync(d + 20000, src.data(), 100, s));  // staged: the source may change now
  src[0] ^= 0xff;
  CU_OK(cuStreamSynchronize(s));
  src[0] ^= 0xff;
  CU_OK(cuStreamDestroy(s));
  std::vector<unsigned char> got(64 * 1024);
  CU_OK(cuMemcpyDtoH(got.data(), d, got.size()));
  for (std::size_t i = 0; i < got.size(); ++i) {
    unsigned char want = 0xab;
    if (i >= 3001 && i < 3001 + src.size()) want = src[i - 3001];
    if (i >= 20000 && i < 20100) want = src[i - 20000];
    if (got[i] != want) FAIL("byte " << i << " is " << int(got[i]) << ", want " << int(want));
  }
  std::vector<unsigned char> tail(4097);
  CU_OK(cuMemcpyDtoH(tail.data(), d + kGranularity - 4097, tail.size()));
  CHECK(std::equal(tail.begin(), tail.end(), src.begin()));
  CU_OK(cuMemUnmap(d, kGranularity));
  CU_OK(cuMemRelease(h));
  CU_OK(cuMemAddressFree(d, kGranularity));
}

TEST_CASE("allocations mapped side by side in one reservation form one range for copies", "[vmm]") {
  use_device0();
  CUmemAllocationProp prop = device_prop(0);
  CUmemGenericAllocationHandle a, b;
  CU_OK(cuMemCreate(&a, kGranularity, &prop, 0));
  CU_OK(cuMemCreate(&b, kGranularity, &prop, 0));
  CUdeviceptr d;
  CU_OK(cuMemAddressReserve(&d, 2 * kGranularity, 0, 0, 0));
  CU_OK(cuMemMap(d, kGranularity, 0, a, 0));
  CU_OK(cuMemMap(d + kGranularity, kGranularity, 0, b, 0));
  CU_OK(set_access(d, 2 * kGranularity, CU_MEM_ACCESS_FLAGS_PROT_READWRITE));  // both at once
  std::vector<std::uint32_t> src = pattern_words(22, kMiB / 4);
  const CUdeviceptr across = d + kGranularity - kMiB / 2;
  CU_OK(cuMemcpyHtoD(across, src.data(), kMiB));
  CHECK(read_u32(across, kMiB / 4) == src);
  CU_OK(cuMemUnmap(d, 2 * kGranularity));  // both mappings in one call
  CU_OK(cuMemRelease(a));
  CU_OK(cuMemRelease(b));
  CU_OK(cuMemAddressFree(d, 2 * kGranularity));
}

TEST_CASE(
    "cuMemRetainAllocationHandle finds the allocation behind an address, and mapped memory "
    "outlives its handles",
    "[vmm]") {
  use_device0();
  const std::size_t size = kGranularity;
  size_t free0 = 0, total = 0;
  CU_OK(cuMemGetInfo(&free0, &total));
  CUmemAllocationProp prop = device_prop(0);
  CUmemGenericAllocationHandle h, retained;
  CU_OK(cuMemCreate(&h, size, &prop, 0));
  size_t free1 = 0;
  CU_OK(cuMemGetInfo(&free1, &total));
  CHECK(free0 - free1 == size);  // cuMemCreate takes device memory
  CUdeviceptr d;
  CU_OK(cuMemAddressReserve(&d, size, 0, 0, 0));
  CU_OK(cuMemMap(d, size, 0, h, 0));
  CU_OK(set_access(d, size, CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
  CU_OK(cuMemsetD32(d, 0x600df00du, size / 4));
  CU_OK(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(d + 12345)));
  CHECK(retained == h);
  CUmemAllocationProp got{};
  CU_OK(cuMemGetAllocationPropertiesFromHandle(&got, retained));
  CHECK(got.location.id == 0);
  CHECK(got.type == CU_MEM_ALLOCATION_TYPE_PINNED);
  CU_OK(cuMemRelease(retained));
  CU_OK(cuMemRelease(h));  // the last handle: the mapping keeps the memory
  CHECK(read_u32(d + size - 4, 1)[0] == 0x600df00du);
  CU_OK(cuMemUnmap(d, size));
  size_t free2 = 0;
  CU_OK(cuMemGetInfo(&free2, &total));
  CHECK(free2 == free0);  // unmapping the last mapping freed it
  CHECK(cu(cuMemAddressFree(d, size / 2)) ==
        "CUDA_ERROR_INVALID_VALUE");  // not the whole reservation
  CU_OK(cuMemAddressFree(d, size));
  void* host = &free0;
  CHECK(cu(cuMemRetainAllocationHandle(&retained, host)) != "CUDA_SUCCESS");
}

TEST_CASE("a reservation cannot be freed while mapped, nor mapped outside a reservation", "[vmm]") {
  use_device0();
  CUmemAllocationProp prop = device_prop(0);
  CUmemGenericAllocationHandle h;
  CU_OK(cuMemCreate(&h, kGranularity, &prop, 0));
  CUdeviceptr d;
  CU_OK(cuMemAddressReserve(&d, 2 * kGranularity, 0, 0, 0));
  CHECK(cu(cuMemMap(d + kGranularity + kGranularity, kGranularity, 0, h, 0)) != "CUDA_SUCCESS");
  CHECK(cu(cuMemMap(d + 4096, kGranularity, 0, h, 0)) != "CUDA_SUCCESS");  // unaligned
  CU_OK(cuMemMap(d, kGranularity, 0, h, 0));
  CHECK(cu(cuMemMap(d, kGranularity, 0, h, 0)) != "CUDA_SUCCESS");  // already mapped there
  CHECK(cu(cuMemAddressFree(d, 2 * kGranularity)) != "CUDA_SUCCESS");
  CU_OK(cuMemUnmap(d, kGranularity));
  CU_OK(cuMemAddressFree(d, 2 * kGranularity));
  CU_OK(cuMemRelease(h));
  CHECK(cu(cuMemRelease(h)) != "CUDA_SUCCESS");
}

TEST_CASE(
    "a VMM allocation exported as a POSIX fd and imported by another process shares its bytes both "
    "ways",
    "[vmm]") {
  use_device0();
  const std::size_t size = 2 * kGranularity, words = size / 4;
  CUmemAllocationProp prop = device_prop(0, true);
  CUmemGenericAllocationHandle h;
  CU_OK(cuMemCreate(&h, size, &prop, 0));
  CUdeviceptr d;
  CU_OK(cuMemAddressReserve(&d, size, 0, 0, 0));
  CU_OK(cuMemMap(d, size, 0, h, 0));
  CU_OK(set_access(d, size, CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
  write_u32(d, pattern_words(31, words));

  int fd = -1;
  CU_OK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  REQUIRE(fd >= 0);
  REQUIRE(fcntl(fd, F_SETFD, 0) == 0);  // inherited by the child
  Child child = Child::mode({"vmm-import", std::to_string(fd), std::to_string(size), "31", "32"});
  close(fd);
  std::vector<std::string> said;
  for (int i = 0; i < 3; ++i) {
    auto line = child.read_line();
    REQUIRE(line);
    said.push_back(*line);
    if (*line == "written" || line->rfind("error", 0) == 0) break;
  }
  INFO("child said: " << [&] {
    std::string s;
    for (auto& l : said) s += l + " | ";
    return s;
  }());
  CHECK(value_of(said, "device") == "0");
  CHECK(value_of(said, "seen") == "ok");
  REQUIRE(said.back() == "written");
  CHECK(read_u32(d, words) == pattern_words(32, words));
  child.send("exit");
  CHECK(child.wait() == 0);

  // Not exportable unless asked for at creation.
  CUmemAllocationProp plain = device_prop(0);
  CUmemGenericAllocationHandle p;
  CU_OK(cuMemCreate(&p, kGranularity, &plain, 0));
  int fd2 = -1;
  CHECK(cu(cuMemExportToShareableHandle(&fd2, p, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)) !=
        "CUDA_SUCCESS");
  CU_OK(cuMemRelease(p));

  CU_OK(cuMemUnmap(d, size));
  CU_OK(cuMemRelease(h));
  CU_OK(cuMemAddressFree(d, size));
}

TEST_CASE("a host load from a mapped VMM pointer faults (SIGSEGV), as on a GPU", "[vmm]") {
  Child child = Child::mode({"deref", "vmm"});
  std::optional<std::string> line = child.read_line();
  REQUIRE(line);
  CHECK(words(*line).at(0) == "touching");
  CHECK_FALSE(child.read_line());
  int status = child.wait();
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGSEGV);
}

}  // namespace
}  // namespace fid
