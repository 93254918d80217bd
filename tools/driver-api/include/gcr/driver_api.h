// gcr/driver_api.h: the CUDA driver ABI as the toolkit headers describe it. This header owns the
// list of cu* functions libcuda.so.1 exports and the cuGetProcAddress table (both generated at
// build time by tools/driver-api/gen_driver_api.py from cuda.h, cudaTypedefs.h and the other
// driver headers), and the lookups simgpu and the interposer do over them.
//
// The generated files are on this target's include path for code that needs one entry per name:
//   #define GCR_DRIVER_SYMBOL(name) ...            #include "driver_symbols.gen.inc"
//   #define GCR_PROC_ENTRY(base, version, flavor, symbol) ...   (flavor is GCR_PROC_LEGACY or
//   GCR_PROC_PTSZ; symbol is a bare identifier)    #include "proc_table.gen.inc"
#pragma once

#include <span>
#include <string_view>

namespace gcr::driver_api {

// The stream flavour of an ABI: the normal one, or the _ptsz/_ptds per-thread-default-stream one.
enum class ProcFlavor { legacy, per_thread };

// One cuGetProcAddress row: `base` as passed to cuGetProcAddress, the cudaVersion that introduced
// this ABI (the N of PFN_<base>_vN in cudaTypedefs.h), and the exported function implementing it.
struct ProcEntry {
  const char* base;
  int version;
  ProcFlavor flavor;
  const char* symbol;
};

// All rows, sorted by (base, flavor, version). Each exported symbol appears in exactly one row.
std::span<const ProcEntry> proc_table();

// Every cu* function the real libcuda.so.1 exports (including the GL/EGL/VDPAU interop and
// profiler entry points), sorted by name.
std::span<const char* const> driver_symbols();
bool is_driver_symbol(std::string_view name);

// The cuGetProcAddress flags (CUdriverProcAddress_flags in cuda.h).
inline constexpr unsigned long long kProcAddressDefault = 0;                 // _DEFAULT
inline constexpr unsigned long long kProcAddressLegacyStream = 1;            // _LEGACY_STREAM
inline constexpr unsigned long long kProcAddressPerThreadDefaultStream = 2;  // _PER_THREAD_...

// found: `symbol` names the function to return. symbol_not_found / version_not_sufficient match
// CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND / _VERSION_NOT_SUFFICIENT. invalid_flags: `flags` is none
// of the three values above (the driver documents only those; answer CUDA_ERROR_INVALID_VALUE).
enum class ProcStatus { found, symbol_not_found, version_not_sufficient, invalid_flags };
struct ProcResolution {
  ProcStatus status;
  const char* symbol;  // null unless found
};

// cuGetProcAddress / cuGetProcAddress_v2 semantics, from cuda.h (CUDA 13.0, the
// CUDA_DRIVER_ENTRY_POINT group) and the real driver's observed answers:
// - `base` is the unversioned name ("cuMemAlloc", not "cuMemAlloc_v2"). An unknown name is
//   symbol_not_found.
// - The result is the newest ABI introduced at or before `cuda_version`; if the name exists only in
//   newer versions, version_not_sufficient.
// - flags 0 (DEFAULT) means PER_THREAD_DEFAULT_STREAM when the caller was built for per-thread
//   default stream (`default_per_thread`; cuda.h's inline wrapper ORs the flag in under
//   CUDA_API_PER_THREAD_DEFAULT_STREAM, so a real driver sees 2), LEGACY_STREAM otherwise.
//   1 (LEGACY_STREAM) never returns a _ptsz/_ptds function.
//   2 (PER_THREAD_DEFAULT_STREAM) returns the per-thread variant; "if a per-thread version is not
//   found, the API will return the legacy version". The real driver reads that per name, not per
//   version: a name with per-thread variants is answered from those only (cuMemcpy with flag 2 is
//   cuMemcpy_ptds from 7000 and version_not_sufficient below 7000, although legacy cuMemcpy dates
//   from 4000), a name without any (cuMemAlloc) from its legacy rows. Source: the table ZLUDA's
//   zluda_bindgen records by probing libcuda.so.1's cuGetProcAddress_v2 at every toolkit version.
// Left to the caller: CUDA_ERROR_INVALID_VALUE when cuda_version is newer than the driver it
// emulates, and mapping the status to a CUresult (the documentation says CUDA_SUCCESS with a null
// pfn when nothing matches; the real driver answers CUDA_ERROR_NOT_FOUND for unknown names).
ProcResolution resolve_proc(std::string_view base, int cuda_version, unsigned long long flags,
                            bool default_per_thread = false);

// The reverse map: the row whose exported function is `symbol` ("cuMemAlloc_v2" gives
// {"cuMemAlloc", 3020, legacy}), or null if `symbol` is not an exported driver function.
const ProcEntry* find_by_symbol(std::string_view symbol);

}  // namespace gcr::driver_api
