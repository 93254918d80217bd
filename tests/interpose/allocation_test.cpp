// Allocation (interpose/alloc.cpp, regions.cpp): every allocation path of a program lands in gcr
// regions, at the same addresses in every run (Note [Regions and slabs]).
#include <cstdio>
#include <map>

#include "common.h"

namespace ipt {
namespace {

struct AllocRun {
  std::vector<PrintedPtr> ptrs;
  std::vector<control::RegionRecord> regions;
  control::StatusInfo status;
};

// Runs the alloc-paths child under gcr: checks that every pointer it printed lies in a region of
// the right device, then that freeing everything (and a quiesce, which completes the
// stream-ordered frees) leaves no region.
AllocRun run_alloc_paths() {
  Child child = Child::mode({"alloc-paths"}, gcr_env());
  AllocRun run;
  std::vector<std::string> lines;
  auto ready = child.read_until("ready", 30000, &lines);
  INFO("child output: " << [&] {
    std::string s;
    for (auto& l : lines) s += l + "\n";
    return s;
  }());
  REQUIRE(ready);
  for (const auto& l : lines)
    if (auto p = parse_ptr(l)) run.ptrs.push_back(*p);
  REQUIRE(run.ptrs.size() == 12);

  control::Client client = connect(child.pid());
  auto regions = client.regions();
  REQUIRE(regions);
  run.regions = *regions;
  auto status = client.status();
  REQUIRE(status);
  run.status = *status;
  for (const PrintedPtr& p : run.ptrs) {
    INFO(p.label << " at " << hex(p.address) << " + " << p.bytes);
    const control::RegionRecord* r = region_holding(run.regions, p.address, p.bytes);
    REQUIRE(r != nullptr);
    CHECK(r->device == std::stoul(p.extra.at(0)));
  }
  REQUIRE(client.close());

  child.send("free");
  REQUIRE(child.read_until("freed"));
  control::Client again = connect(child.pid());
  REQUIRE(again.quiesce(std::chrono::seconds(10)));
  auto left = again.regions();
  REQUIRE(left);
  CHECK(left->empty());
  auto after = again.status();
  REQUIRE(after);
  CHECK(after->requested_bytes == 0);
  REQUIRE(again.resume());
  REQUIRE(again.close());
  child.send("quit");
  CHECK(describe_status(child.wait()) == "exit 0");
  return run;
}

TEST_CASE("every allocation path lands in a gcr region, at the same address in every run",
          "[alloc]") {
  AllocRun first = run_alloc_paths();
  AllocRun second = run_alloc_paths();

  REQUIRE(first.ptrs.size() == second.ptrs.size());
  for (std::size_t i = 0; i < first.ptrs.size(); ++i) {
    INFO(first.ptrs[i].label);
    CHECK(first.ptrs[i].label == second.ptrs[i].label);
    CHECK(hex(first.ptrs[i].address) == hex(second.ptrs[i].address));
  }
  CHECK(first.regions == second.regions);

  // Slab overhead: what the regions hold against what the program asked for. The program's own
  // VMM mapping counts in region bytes but not in requested bytes (gcr did not allocate it).
  std::uint64_t user_bytes = 0;
  for (const PrintedPtr& p : first.ptrs)
    if (p.label == "vmm_user") user_bytes = p.bytes;
  const auto& s = first.status;
  std::uint64_t gcr_region_bytes = s.region_bytes - user_bytes;
  std::printf(
      "alloc paths: %llu regions, %llu region bytes (%llu of them the program's own VMM mapping), "
      "%llu bytes requested through cuMemAlloc*/pitch/async/pool; slab and rounding overhead %llu "
      "bytes (%.1f%% of the requested)\n",
      static_cast<unsigned long long>(s.regions), static_cast<unsigned long long>(s.region_bytes),
      static_cast<unsigned long long>(user_bytes),
      static_cast<unsigned long long>(s.requested_bytes),
      static_cast<unsigned long long>(gcr_region_bytes - s.requested_bytes),
      100.0 * static_cast<double>(gcr_region_bytes - s.requested_bytes) /
          static_cast<double>(s.requested_bytes));
  CHECK(gcr_region_bytes >= s.requested_bytes);
}

TEST_CASE("small allocations share 2 MiB slabs and large ones get regions of their own",
          "[alloc]") {
  Child child = Child::mode({"alloc-paths"}, gcr_env());
  std::vector<std::string> lines;
  REQUIRE(child.read_until("ready", 30000, &lines));
  std::map<std::string, PrintedPtr> by_label;
  for (const auto& l : lines)
    if (auto p = parse_ptr(l)) by_label[p->label] = *p;
  control::Client client = connect(child.pid());
  auto regions = client.regions();
  REQUIRE(regions);
  auto region_of = [&](const char* label) {
    const PrintedPtr& p = by_label.at(label);
    const control::RegionRecord* r = region_holding(*regions, p.address, p.bytes);
    REQUIRE(r != nullptr);
    return *r;
  };
  // Device 0's small requests (4 KiB, ~98 KiB, the pitched 512x37, 64 KiB async, 8 KiB from
  // the pool) share one slab.
  auto slab = region_of("alloc_small");
  CHECK(slab.size == (2u << 20));
  for (const char* small : {"alloc_small2", "pitch", "async_small", "pool_default"}) {
    INFO(small);
    CHECK(region_of(small) == slab);
  }
  // Each large one is a region of its own, its size rounded up to 2 MiB, starting at the pointer.
  for (const char* large : {"alloc_large", "async_large", "dev1_large", "vmm_user"}) {
    INFO(large);
    auto r = region_of(large);
    CHECK(r.address == by_label.at(large).address);
    CHECK(r.size % (2u << 20) == 0);
    CHECK(r.size - by_label.at(large).bytes < (2u << 20));
  }
  // Device 1's small allocations have a slab of their own: slabs are per device. The
  // stream-ordered ones are device 1's because their stream or pool is, whatever context is
  // current.
  auto slab1 = region_of("dev1_small");
  CHECK(slab1.device == 1);
  CHECK(!(slab1 == slab));
  for (const char* small : {"async_dev1_stream", "pool_dev1"}) {
    INFO(small);
    CHECK(region_of(small) == slab1);
  }
  REQUIRE(client.close());
  child.send("quit");
  CHECK(describe_status(child.wait()) == "exit 0");
}

TEST_CASE("address range queries describe the program's allocation, not the slab behind it",
          "[alloc]") {
  require_under_gcr();
  use_device(0);
  CUdeviceptr a = 0, b = 0;
  CU_OK(cuMemAlloc(&a, 1000));
  CU_OK(cuMemAlloc(&b, 3000));
  CUdeviceptr base = 0;
  size_t size = 0;
  CU_OK(cuMemGetAddressRange(&base, &size, b + 2999));
  CHECK(hex(base) == hex(b));
  CHECK(size == 3000);
  CUdeviceptr start = 0;
  size_t range = 0;
  CU_OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, a + 10));
  CU_OK(cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, a + 10));
  CHECK(hex(start) == hex(a));
  CHECK(range == 1000);
  CU_OK(cuMemFree(a));
  CU_OK(cuMemFree(b));
}

}  // namespace
}  // namespace ipt
