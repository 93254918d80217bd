// proc_table_test.cpp: unit tests of gcr/driver_api.h: cuGetProcAddress resolution against known
// answers of the real driver, the invariants tying the generated table to the exported names, and
// the comparison with the CUDA toolkit's stub libcuda.so when it is installed.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <tuple>

#include "elf_exports.h"
#include "gcr/driver_api.h"

namespace {

using gcr::driver_api::driver_symbols;
using gcr::driver_api::find_by_symbol;
using gcr::driver_api::is_driver_symbol;
using gcr::driver_api::kProcAddressDefault;
using gcr::driver_api::kProcAddressLegacyStream;
using gcr::driver_api::kProcAddressPerThreadDefaultStream;
using gcr::driver_api::proc_table;
using gcr::driver_api::ProcEntry;
using gcr::driver_api::ProcFlavor;
using gcr::driver_api::ProcStatus;
using gcr::driver_api::resolve_proc;

// The symbol resolve_proc picks, or "<not found>" / "<version not sufficient>" / "<bad flags>".
std::string resolved(std::string_view base, int version, unsigned long long flags,
                     bool default_per_thread = false) {
  auto r = resolve_proc(base, version, flags, default_per_thread);
  switch (r.status) {
    case ProcStatus::found:
      return r.symbol;
    case ProcStatus::symbol_not_found:
      return "<not found>";
    case ProcStatus::version_not_sufficient:
      return "<version not sufficient>";
    case ProcStatus::invalid_flags:
      return "<bad flags>";
  }
  return "<unreachable>";
}

constexpr auto kLegacy = kProcAddressLegacyStream;
constexpr auto kPerThread = kProcAddressPerThreadDefaultStream;

// <base>[_vN][_ptsz|_ptds]
const std::regex kSymbolShape("(cu[A-Za-z0-9]+?)(?:_v([0-9]+))?(_ptsz|_ptds)?");

int suffix_rank(const std::string& symbol) {
  std::smatch m;
  REQUIRE(std::regex_match(symbol, m, kSymbolShape));
  return m[2].matched ? std::stoi(m[2]) : 1;
}

}  // namespace

TEST_CASE("cuMemAlloc is cuMemAlloc_v2 from 3020, cuMemAlloc from 2000, absent before") {
  CHECK(resolved("cuMemAlloc", 13000, kLegacy) == "cuMemAlloc_v2");
  CHECK(resolved("cuMemAlloc", 3020, kLegacy) == "cuMemAlloc_v2");
  CHECK(resolved("cuMemAlloc", 3010, kLegacy) == "cuMemAlloc");
  CHECK(resolved("cuMemAlloc", 2000, kLegacy) == "cuMemAlloc");
  CHECK(resolved("cuMemAlloc", 1000, kLegacy) == "<version not sufficient>");
  CHECK(resolve_proc("cuMemAlloc", 1000, kLegacy).symbol == nullptr);
}

TEST_CASE("cuCtxCreate picks one of its four ABIs by version") {
  CHECK(resolved("cuCtxCreate", 2000, kLegacy) == "cuCtxCreate");
  CHECK(resolved("cuCtxCreate", 3020, kLegacy) == "cuCtxCreate_v2");
  CHECK(resolved("cuCtxCreate", 11040, kLegacy) == "cuCtxCreate_v3");
  CHECK(resolved("cuCtxCreate", 12000, kLegacy) == "cuCtxCreate_v3");
  CHECK(resolved("cuCtxCreate", 12050, kLegacy) == "cuCtxCreate_v4");
  CHECK(resolved("cuCtxCreate", 13000, kLegacy) == "cuCtxCreate_v4");
}

TEST_CASE("cuMemcpyHtoDAsync with the per-thread flag is cuMemcpyHtoDAsync_v2_ptsz") {
  CHECK(resolved("cuMemcpyHtoDAsync", 12000, kPerThread) == "cuMemcpyHtoDAsync_v2_ptsz");
  CHECK(resolved("cuMemcpyHtoDAsync", 7000, kPerThread) == "cuMemcpyHtoDAsync_v2_ptsz");
  CHECK(resolved("cuMemcpyHtoDAsync", 12000, kLegacy) == "cuMemcpyHtoDAsync_v2");
}

TEST_CASE("cuMemcpy with the per-thread flag is cuMemcpy_ptds") {
  CHECK(resolved("cuMemcpy", 12000, kPerThread) == "cuMemcpy_ptds");
  CHECK(resolved("cuMemcpy", 12000, kLegacy) == "cuMemcpy");
}

TEST_CASE("The default flag follows the caller's default-stream mode") {
  CHECK(resolved("cuMemcpy", 12000, kProcAddressDefault) == "cuMemcpy");
  CHECK(resolved("cuMemcpy", 12000, kProcAddressDefault, true) == "cuMemcpy_ptds");
  CHECK(resolved("cuLaunchKernel", 12000, kProcAddressDefault, true) == "cuLaunchKernel_ptsz");
  CHECK(resolved("cuMemAlloc", 12000, kProcAddressDefault, true) == "cuMemAlloc_v2");
}

TEST_CASE(
    "A call without a per-thread variant returns its legacy function under the per-thread "
    "flag") {
  CHECK(resolved("cuMemAlloc", 13000, kPerThread) == "cuMemAlloc_v2");
  CHECK(resolved("cuMemAlloc", 2000, kPerThread) == "cuMemAlloc");
  CHECK(resolved("cuCtxCreate", 12050, kPerThread) == "cuCtxCreate_v4");
  CHECK(resolved("cuGetProcAddress", 12000, kPerThread) == "cuGetProcAddress_v2");
}

TEST_CASE("A per-thread query older than the per-thread variant does not fall back to legacy") {
  // Observed on the real driver: cuMemcpy_ptds dates from 7000, legacy cuMemcpy from 4000.
  CHECK(resolved("cuMemcpy", 6050, kPerThread) == "<version not sufficient>");
  CHECK(resolved("cuMemcpy", 6050, kLegacy) == "cuMemcpy");
  CHECK(resolved("cuMemPrefetchAsync", 8000, kPerThread) == "cuMemPrefetchAsync_ptsz");
  CHECK(resolved("cuMemPrefetchAsync", 12020, kPerThread) == "cuMemPrefetchAsync_v2_ptsz");
}

TEST_CASE("Unknown names are symbol_not_found, including versioned and runtime names") {
  CHECK(resolved("cuNoSuchFunction", 13000, kLegacy) == "<not found>");
  CHECK(resolved("cuMemAlloc_v2", 13000, kLegacy) == "<not found>");
  CHECK(resolved("cudaMalloc", 13000, kLegacy) == "<not found>");
  CHECK(resolved("", 13000, kLegacy) == "<not found>");
  CHECK(resolve_proc("cuNoSuchFunction", 13000, kLegacy).symbol == nullptr);
}

TEST_CASE("cuGetProcAddress resolves to the 5-argument cuGetProcAddress_v2 from 12000") {
  CHECK(resolved("cuGetProcAddress", 12000, kLegacy) == "cuGetProcAddress_v2");
  CHECK(resolved("cuGetProcAddress", 11030, kLegacy) == "cuGetProcAddress");
  CHECK(resolved("cuGetProcAddress", 11020, kLegacy) == "<version not sufficient>");
}

TEST_CASE("New _vN functions that cuda.h does not make the default still answer their base name") {
  CHECK(resolved("cuCtxGetDevice", 12090, kLegacy) == "cuCtxGetDevice");
  CHECK(resolved("cuCtxGetDevice", 13000, kLegacy) == "cuCtxGetDevice_v2");
  CHECK(resolved("cuStreamGetCtx", 12050, kLegacy) == "cuStreamGetCtx_v2");
  CHECK(resolved("cuStreamGetCtx", 12050, kPerThread) == "cuStreamGetCtx_v2_ptsz");
  CHECK(resolved("cuEventElapsedTime", 12080, kLegacy) == "cuEventElapsedTime_v2");
  // cuda.h's `#define cuGraphInstantiate cuGraphInstantiateWithFlags` is source-level only.
  CHECK(resolved("cuGraphInstantiate", 13000, kLegacy) == "cuGraphInstantiate_v2");
  CHECK(resolved("cuGraphInstantiateWithFlags", 13000, kLegacy) == "cuGraphInstantiateWithFlags");
}

TEST_CASE("Flags other than DEFAULT, LEGACY_STREAM and PER_THREAD_DEFAULT_STREAM are rejected") {
  CHECK(resolved("cuMemAlloc", 13000, 3) == "<bad flags>");
  CHECK(resolved("cuMemAlloc", 13000, 4) == "<bad flags>");
}

TEST_CASE("The interop and profiler entry points are in the table") {
  CHECK(resolved("cuGLGetDevices", 6050, kLegacy) == "cuGLGetDevices_v2");
  CHECK(resolved("cuGLGetDevices", 4010, kLegacy) == "cuGLGetDevices");
  CHECK(resolved("cuGLMapBufferObject", 7000, kPerThread) == "cuGLMapBufferObject_v2_ptds");
  CHECK(resolved("cuProfilerStart", 4000, kLegacy) == "cuProfilerStart");
  CHECK(resolved("cuVDPAUCtxCreate", 3020, kLegacy) == "cuVDPAUCtxCreate_v2");
}

TEST_CASE("find_by_symbol maps an exported function back to its base, version and flavour") {
  const ProcEntry* e = find_by_symbol("cuMemAlloc_v2");
  REQUIRE(e != nullptr);
  CHECK(std::string(e->base) == "cuMemAlloc");
  CHECK(e->version == 3020);
  CHECK(e->flavor == ProcFlavor::legacy);

  e = find_by_symbol("cuMemcpyHtoDAsync_v2_ptsz");
  REQUIRE(e != nullptr);
  CHECK(std::string(e->base) == "cuMemcpyHtoDAsync");
  CHECK(e->version == 7000);
  CHECK(e->flavor == ProcFlavor::per_thread);

  e = find_by_symbol("cuMemAlloc");
  REQUIRE(e != nullptr);
  CHECK(e->version == 2000);

  CHECK(find_by_symbol("cuNoSuchFunction") == nullptr);
  CHECK(find_by_symbol("cudaMalloc") == nullptr);
  CHECK(find_by_symbol("") == nullptr);
}

TEST_CASE("Every proc table symbol is an exported driver symbol, and the reverse, once each") {
  std::map<std::string, int> rows_per_symbol;
  for (const ProcEntry& e : proc_table()) ++rows_per_symbol[e.symbol];
  for (const auto& [symbol, rows] : rows_per_symbol) {
    INFO(symbol);
    CHECK(is_driver_symbol(symbol));
    CHECK(rows == 1);
  }
  for (const char* symbol : driver_symbols()) {
    INFO(symbol);
    CHECK(rows_per_symbol.count(symbol) == 1);
    const ProcEntry* e = find_by_symbol(symbol);
    REQUIRE(e != nullptr);
    CHECK(std::string(e->symbol) == symbol);
  }
  CHECK(proc_table().size() == driver_symbols().size());
}

TEST_CASE("Driver symbols are sorted, unique and all start with cu") {
  std::set<std::string> seen;
  std::string previous;
  for (const char* symbol : driver_symbols()) {
    std::string s = symbol;
    INFO(s);
    CHECK(s.rfind("cu", 0) == 0);
    CHECK(previous < s);
    CHECK(seen.insert(s).second);
    previous = s;
  }
  CHECK(driver_symbols().size() >= 637);  // the CUDA 13.0 stub's count
}

TEST_CASE("Each row's symbol is its base with an optional _vN and the flavour's suffix") {
  for (const ProcEntry& e : proc_table()) {
    std::string symbol = e.symbol;
    INFO(symbol);
    std::smatch m;
    REQUIRE(std::regex_match(symbol, m, kSymbolShape));
    CHECK(m[1] == e.base);
    CHECK(m[3].matched == (e.flavor == ProcFlavor::per_thread));
    CHECK(e.version >= 2000);
    CHECK(e.version % 10 == 0);
  }
}

TEST_CASE("Within a base and flavour, newer versions map to higher _vN suffixes") {
  std::map<std::tuple<std::string, ProcFlavor>, const ProcEntry*> last;
  for (const ProcEntry& e : proc_table()) {
    auto key = std::tuple(std::string(e.base), e.flavor);
    auto it = last.find(key);
    if (it != last.end()) {
      INFO(e.symbol);
      CHECK(it->second->version < e.version);
      CHECK(suffix_rank(it->second->symbol) < suffix_rank(e.symbol));
    }
    last[key] = &e;
  }
}

TEST_CASE("Every row is what cuGetProcAddress returns at the version that introduced it") {
  for (const ProcEntry& e : proc_table()) {
    INFO(e.symbol);
    auto flags = e.flavor == ProcFlavor::per_thread ? kPerThread : kLegacy;
    CHECK(resolved(e.base, e.version, flags) == e.symbol);
  }
}

TEST_CASE("Every stub libcuda.so export is a driver symbol; the extras are graphics interop") {
  const char* env = std::getenv("GCR_CUDA_STUB_LIBCUDA");
  std::string path = env != nullptr ? env : GCR_CUDA_STUB_LIBCUDA;
  auto exports = path.empty() ? std::nullopt : gcr::test::elf_exported_functions(path);
  if (!exports) {
    WARN("CUDA stub libcuda.so not found at '" << path << "'; comparison skipped");
    return;
  }
  std::set<std::string> stub;
  for (const std::string& name : *exports) {
    if (name.rfind("cu", 0) == 0) stub.insert(name);
  }
  CHECK(stub.size() >= 637);
  for (const std::string& name : stub) {
    INFO(name);
    CHECK(is_driver_symbol(name));
  }
  // The stub leaves out the OpenGL, EGL and VDPAU interop functions (cudaGL.h, cudaEGL.h,
  // cudaVDPAU.h) that the real libcuda.so.1 exports and its cuGetProcAddress resolves.
  const std::regex interop(
      "cu(GL|EGL|VDPAU|GraphicsGL|GraphicsEGL|GraphicsVDPAU)[A-Za-z0-9_]*|"
      "cuEventCreateFromEGLSync|cuGraphicsResourceGetMappedEglFrame");
  for (const char* symbol : driver_symbols()) {
    if (stub.count(symbol) == 0) {
      INFO(symbol << " is exported by the real driver per the headers but not by the stub");
      CHECK(std::regex_match(symbol, interop));
    }
  }
}
