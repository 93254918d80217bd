// Write tracking: for each launch, copy and memset, mark the regions it may write
// (Note [Regions and slabs] for the marking; Note [Write tracking] below for what a launch may
// write).
//
// Note [Write tracking]
// A kernel may write through any device pointer among its arguments. The parameter layout comes
// from cuFuncGetParamInfo, cached per function on its first launch; every 8-byte-aligned word of
// the parameter buffer that points into the arena marks its region, which covers pointer
// parameters and pointers inside struct parameters. With GCR_TRACK=speculative (the default), a
// parameter whose demangled C++ type is a pointer to const (`float const*`) is taken as read only.
// What this cannot see: pointers stored in device memory (a kernel walking a pointer array),
// which GCR_TRACK=conservative covers by treating every launch as writing every region, and
// GCR_TRACK=validate finds (Note [Validating write tracking] in validate.h), recording the kernels
// in a profile that makes later runs treat them so. Graph launches and batched memory operations
// are always treated conservatively.
#include <cxxabi.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "alloc.h"
#include "config.h"
#include "cut.h"
#include "gate.h"
#include "real_driver.h"
#include "regions.h"
#include "validate.h"

namespace gcr::interpose {
namespace {

struct ParamSpan {
  std::uint32_t offset;
  std::uint32_t size;
  bool read_only;  // pointer-to-const under GCR_TRACK=speculative
};

struct FuncInfo {
  CUfunction function = nullptr;
  bool known = false;  // false: the layout is unknown, so every launch marks everything
  std::vector<ParamSpan> params;
  std::string name;        // as the driver names it (mangled), for --track validate and its profile
  bool comm_name = false;  // a communication kernel by name (Note [A consistent cut] in cut.h)
};

// Lock-free for readers: slots are written once, under g_func_mu, and never change.
constexpr std::size_t kFuncSlots = 1 << 14;
std::array<std::atomic<const FuncInfo*>, kFuncSlots> g_funcs{};
RankedMutex g_func_mu{LockRank::functions};
const FuncInfo kUnknown{};

std::size_t slot_of(CUfunction f) {
  auto v = reinterpret_cast<std::uintptr_t>(f);
  return static_cast<std::size_t>((v >> 4) * 0x9E3779B97F4A7C15ull >> 50) & (kFuncSlots - 1);
}

// The parameter types of a demangled name "f(float*, float const*, int)", split at top level.
std::vector<std::string> parameter_types(const std::string& demangled) {
  std::vector<std::string> out;
  auto open = demangled.find('(');
  if (open == std::string::npos) return out;
  int depth = 0;
  std::string cur;
  for (std::size_t i = open + 1; i < demangled.size(); ++i) {
    char c = demangled[i];
    if ((c == ',' || c == ')') && depth == 0) {
      while (!cur.empty() && cur.front() == ' ') cur.erase(cur.begin());
      out.push_back(cur);
      cur.clear();
      if (c == ')') break;
      continue;
    }
    if (c == '(' || c == '<') ++depth;
    if (c == ')' || c == '>') --depth;
    cur += c;
  }
  return out;
}

// "float const*", "float const* __restrict__": a pointer whose pointee is const.
bool pointer_to_const(std::string t) {
  for (const char* q : {" __restrict__", " __restrict", " restrict", " const", " volatile"})
    while (t.size() > std::strlen(q) &&
           t.compare(t.size() - std::strlen(q), std::strlen(q), q) == 0)
      t.resize(t.size() - std::strlen(q));
  if (t.empty() || t.back() != '*') return false;
  t.pop_back();
  return t.size() >= 5 && t.compare(t.size() - 5, 5, "const") == 0;
}

const FuncInfo* build_info(CUfunction f) {
  const RealDriver* real = real_driver();
  auto* info = new FuncInfo;  // immortal: published to lock-free readers
  info->function = f;
  for (std::size_t i = 0;; ++i) {
    std::size_t offset = 0, size = 0;
    CUresult r = real->cuFuncGetParamInfo ? real->cuFuncGetParamInfo(f, i, &offset, &size)
                                          : CUDA_ERROR_NOT_SUPPORTED;
    if (r == CUDA_ERROR_INVALID_VALUE && i > 0) break;  // past the last parameter
    if (r == CUDA_ERROR_INVALID_VALUE && i == 0) {      // no parameters, or not a kernel
      info->known = true;
      break;
    }
    if (r != CUDA_SUCCESS) {
      info->known = false;
      info->params.clear();
      return info;
    }
    info->params.push_back(
        {static_cast<std::uint32_t>(offset), static_cast<std::uint32_t>(size), false});
    info->known = true;
  }
  const char* name = nullptr;
  if (real->cuFuncGetName && real->cuFuncGetName(&name, f) == CUDA_SUCCESS && name)
    info->name = name;
  info->comm_name = comm_kernel_name(info->name.c_str());
  bool infer_const =
      config().track == TrackMode::speculative || config().track == TrackMode::validate;
  if (infer_const && !info->name.empty()) {
    int status = 0;
    char* d = abi::__cxa_demangle(info->name.c_str(), nullptr, nullptr, &status);
    if (status == 0 && d) {
      auto types = parameter_types(d);
      if (types.size() == info->params.size())
        for (std::size_t i = 0; i < types.size(); ++i)
          info->params[i].read_only = pointer_to_const(types[i]);
      std::free(d);
    }
  }
  // A kernel --track validate caught writing where its parameters do not say.
  if (!info->name.empty() && profiled_as_writing_all(info->name)) {
    info->known = false;
    info->params.clear();
  }
  return info;
}

const FuncInfo* func_info(CUfunction f) {
  std::size_t s = slot_of(f);
  for (std::size_t probe = 0; probe < 64; ++probe) {
    const FuncInfo* fi = g_funcs[(s + probe) & (kFuncSlots - 1)].load(std::memory_order_acquire);
    if (!fi) break;
    if (fi->function == f) return fi;
  }
  MutexLock lock(g_func_mu);
  for (std::size_t probe = 0; probe < 64; ++probe) {
    auto& slot = g_funcs[(s + probe) & (kFuncSlots - 1)];
    const FuncInfo* fi = slot.load(std::memory_order_acquire);
    if (fi && fi->function == f) return fi;
    if (!fi) {
      const FuncInfo* built = build_info(f);
      slot.store(built, std::memory_order_release);
      return built;
    }
  }
  return &kUnknown;  // table crowded: treat this function conservatively
}

// Every 8-byte word of a launch's parameter buffer that lies within a parameter of 8 bytes or
// more, aligned as the GPU reads them: fn(word, read_only of its parameter).
template <typename Fn>
inline void for_param_words(const FuncInfo* fi, void** params, void** extra, Fn&& fn) {
  auto words = [&](const std::byte* p, const ParamSpan& span) {
    std::uint32_t first = (span.offset + 7) & ~7u;
    for (std::uint32_t o = first; o + 8 <= span.offset + span.size; o += 8) {
      std::uint64_t word;
      std::memcpy(&word, p + (o - span.offset), 8);
      fn(word, span.read_only);
    }
  };
  if (params) {
    for (std::size_t i = 0; i < fi->params.size(); ++i) {
      const ParamSpan& p = fi->params[i];
      if (p.size >= 8 && params[i]) words(static_cast<const std::byte*>(params[i]), p);
    }
  } else if (extra) {
    const std::byte* buf = nullptr;
    for (void** e = extra; *e != CU_LAUNCH_PARAM_END; e += 2)
      if (*e == CU_LAUNCH_PARAM_BUFFER_POINTER) buf = static_cast<const std::byte*>(e[1]);
    if (!buf) return;
    for (const ParamSpan& p : fi->params)
      if (p.size >= 8) words(buf + p.offset, p);
  }
}

void mark_launch(CUfunction f, void** params, void** extra) {
  if (!g_arena.base && g_pinned_armed.load(std::memory_order_relaxed) == 0 &&
      g_pinned_unseen.load(std::memory_order_relaxed))
    return;
  if (config().track == TrackMode::conservative) {
    mark_all_written();
    return;
  }
  const FuncInfo* fi = func_info(f);
  if (!fi->known) {
    mark_all_written();
    return;
  }
  // Note [Device writes to pinned host memory]: it writes through pointers in device memory,
  // and so may write every shared region (Note [Shared memory written job-wide] in regions.h).
  if (fi->comm_name) [[unlikely]] {
    host_written_anywhere();
    mark_shared_written();
  }
  // What a kernel only reads counts for the first-touch order, and during an on-demand restore
  // must have arrived too.
  for_param_words(fi, params, extra, [](std::uint64_t word, bool read_only) {
    if (read_only)
      touch_read(word);
    else
      mark_written(word);
  });
}

void mark_2d(const CUDA_MEMCPY2D* p) {
  if (!p || p->Height == 0) return;
  const std::uint64_t offset = p->dstY * p->dstPitch + p->dstXInBytes;
  const std::uint64_t extent = (p->Height - 1) * p->dstPitch + p->WidthInBytes;
  if (p->dstMemoryType == CU_MEMORYTYPE_HOST)
    host_written(reinterpret_cast<std::uint64_t>(p->dstHost) + offset, extent);
  else if (p->dstMemoryType == CU_MEMORYTYPE_DEVICE || p->dstMemoryType == CU_MEMORYTYPE_UNIFIED)
    mark_range_written(p->dstDevice + offset, extent);
}

void touch_2d_source(const CUDA_MEMCPY2D* p) {
  if (!p || p->Height == 0 ||
      (p->srcMemoryType != CU_MEMORYTYPE_DEVICE && p->srcMemoryType != CU_MEMORYTYPE_UNIFIED))
    return;
  touch_range_read(p->srcDevice + p->srcY * p->srcPitch + p->srcXInBytes,
                   (p->Height - 1) * p->srcPitch + p->WidthInBytes);
}

void touch_3d_source(const CUDA_MEMCPY3D* p) {
  if (!p || (p->srcMemoryType != CU_MEMORYTYPE_DEVICE && p->srcMemoryType != CU_MEMORYTYPE_UNIFIED))
    return;
  std::uint64_t slice = p->srcPitch * (p->srcHeight ? p->srcHeight : p->Height);
  touch_range_read(p->srcDevice, slice * (p->srcZ + p->Depth));
}

void mark_3d(const CUDA_MEMCPY3D* p) {
  if (!p) return;
  std::uint64_t slice = p->dstPitch * (p->dstHeight ? p->dstHeight : p->dstY + p->Height);
  if (p->dstMemoryType == CU_MEMORYTYPE_HOST)
    host_written(reinterpret_cast<std::uint64_t>(p->dstHost), slice * (p->dstZ + p->Depth));
  else if (p->dstMemoryType == CU_MEMORYTYPE_DEVICE || p->dstMemoryType == CU_MEMORYTYPE_UNIFIED)
    mark_range_written(p->dstDevice, slice * (p->dstZ + p->Depth));
}

}  // namespace

// Whether `address` is in memory shared with another process.
bool in_shared_memory(std::uint64_t address) {
  if (!g_arena.base || !in_arena(address)) return false;
  std::uint32_t id =
      g_arena.granule_region[(address - g_arena.base) / kGranule].load(std::memory_order_relaxed);
  if (!id || !g_regions[id].shared.load(std::memory_order_relaxed)) return false;
  return g_regions[id].kind != RegionKind::slab || in_shared_range(address);
}

// Whether a kernel launch is a communication launch (Note [A consistent cut] in cut.h).
bool comm_launch(CUfunction f, void** params, void** extra) {
  if (!g_arena.base) return false;
  const FuncInfo* fi = func_info(f);
  if (fi->comm_name) return true;
  // A kernel of unknown layout is not counted: the ranks must count the same launches, and
  // what cannot be seen cannot be counted alike.
  bool comm = false;
  for_param_words(fi, params, extra,
                  [&](std::uint64_t word, bool) { comm = comm || in_shared_memory(word); });
  return comm;
}

// Whether a stream memory operation on `address` is a communication launch (ibid.): on shared
// memory, or on host memory, whose value a thread of the process may relay to a peer (the proxy
// of a socket transport: Note [TCP within a job] in daemon/job_tcp.h). Not the launch hot path.
bool memop_comm(std::uint64_t address) {
  if (!g_arena.base || !in_arena(address)) return true;  // mapped host memory (or imported)
  return g_comm_possible.load(std::memory_order_relaxed) && in_shared_memory(address);
}

// Whether a batch of stream memory operations is a communication launch: one of them is (ibid.).
bool comm_memops(unsigned count, const CUstreamBatchMemOpParams* ops) {
  if (!ops) return false;  // the driver refuses it
  for (unsigned i = 0; i < count; ++i) {
    switch (ops[i].operation) {
      case CU_STREAM_MEM_OP_WAIT_VALUE_32:
      case CU_STREAM_MEM_OP_WAIT_VALUE_64:
        if (memop_comm(ops[i].waitValue.address)) return true;
        break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_32:
      case CU_STREAM_MEM_OP_WRITE_VALUE_64:
        if (memop_comm(ops[i].writeValue.address)) return true;
        break;
      default:
        break;
    }
  }
  return false;
}

LaunchWrites launch_writes(CUfunction f, void** params, void** extra) {
  LaunchWrites w;
  if (config().track == TrackMode::conservative || !g_arena.base) return w;
  const FuncInfo* fi = func_info(f);
  w.known = fi->known;
  w.kernel = fi->name;
  if (!w.known) return w;
  for_param_words(fi, params, extra, [&](std::uint64_t word, bool read_only) {
    if (read_only || !in_arena(word)) return;
    std::uint32_t id =
        g_arena.granule_region[(word - g_arena.base) / kGranule].load(std::memory_order_acquire);
    if (id && std::find(w.regions.begin(), w.regions.end(), id) == w.regions.end())
      w.regions.push_back(id);
  });
  return w;
}

}  // namespace gcr::interpose

using namespace gcr::interpose;

// One wrapper per exported name: mark what the call may write, then call the real function with
// the same arguments. What follows is a declaration table (a line or two per wrapper): exempt from
// the 80-line limit on functions (issue 33). `real` is resolved once per name, as a fn_type;
// GCR_WRAP takes the type of the function cuda.h declares as type_of.
#define GCR_WRAP_TYPED(fn_type, name, params, args, mark) \
  extern "C" CUresult name params {                       \
    static const auto real = real_fn<fn_type>(#name);     \
    if (!g_unmanaged) {                                   \
      GateScope gate;                                     \
      mark;                                               \
      return real args;                                   \
    }                                                     \
    return real args;                                     \
  }
#define GCR_WRAP(type_of, name, params, args, mark) \
  GCR_WRAP_TYPED(decltype(&::type_of), name, params, args, mark)
// The legacy name and its per-thread-default-stream twin (same signature).
#define GCR_WRAP2(name, suffix, params, args, mark) \
  GCR_WRAP(name, name, params, args, mark)          \
  GCR_WRAP(name, name##suffix, params, args, mark)
// A kernel launch: marked, and checked around the launch under GCR_TRACK=validate.
// A communication launch is counted, and held during a job's cut, before the gate's scope (Note
// [A consistent cut] in cut.h).
#define GCR_WRAP_LAUNCH(type_of, name, params, args, fn, kp, extra)                      \
  extern "C" CUresult name params {                                                      \
    static const auto real = real_fn<decltype(&::type_of)>(#name);                       \
    if (!g_unmanaged) {                                                                  \
      const bool comm =                                                                  \
          g_comm_possible.load(std::memory_order_relaxed) && comm_launch(fn, kp, extra); \
      if (comm) [[unlikely]]                                                             \
        cut_admit();                                                                     \
      GateScope gate;                                                                    \
      mark_launch(fn, kp, extra);                                                        \
      CUresult launched;                                                                 \
      if (config().track == TrackMode::validate) [[unlikely]] {                          \
        LaunchValidation validation(fn, kp, extra);                                      \
        launched = real args;                                                            \
        validation.after(launched);                                                      \
      } else {                                                                           \
        launched = real args;                                                            \
      }                                                                                  \
      if (comm) [[unlikely]]                                                             \
        cut_issued();                                                                    \
      return launched;                                                                   \
    }                                                                                    \
    return real args;                                                                    \
  }
#define GCR_WRAP_LAUNCH2(name, suffix, params, args, fn, kp, extra) \
  GCR_WRAP_LAUNCH(name, name, params, args, fn, kp, extra)          \
  GCR_WRAP_LAUNCH(name, name##suffix, params, args, fn, kp, extra)

GCR_WRAP_LAUNCH2(cuLaunchKernel, _ptsz,
                 (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                  unsigned bz, unsigned shared, CUstream s, void** kp, void** extra),
                 (f, gx, gy, gz, bx, by, bz, shared, s, kp, extra), f, kp, extra)
GCR_WRAP_LAUNCH2(cuLaunchKernelEx, _ptsz,
                 (const CUlaunchConfig* c, CUfunction f, void** kp, void** extra),
                 (c, f, kp, extra), f, kp, extra)
GCR_WRAP_LAUNCH2(cuLaunchCooperativeKernel, _ptsz,
                 (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                  unsigned bz, unsigned shared, CUstream s, void** kp),
                 (f, gx, gy, gz, bx, by, bz, shared, s, kp), f, kp, nullptr)
GCR_WRAP2(cuGraphLaunch, _ptsz, (CUgraphExec g, CUstream s), (g, s), mark_all_written())

GCR_WRAP2(cuMemcpy, _ptds, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n),
          (touch_range_read(s, n), mark_range_written(d, n)))
GCR_WRAP2(cuMemcpyAsync, _ptsz, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st),
          (d, s, n, st), (touch_range_read(s, n), mark_range_written(d, n)))
GCR_WRAP2(cuMemcpyHtoD_v2, _ptds, (CUdeviceptr d, const void* s, size_t n), (d, s, n),
          mark_range_written(d, n))
GCR_WRAP2(cuMemcpyHtoDAsync_v2, _ptsz, (CUdeviceptr d, const void* s, size_t n, CUstream st),
          (d, s, n, st), mark_range_written(d, n))
GCR_WRAP2(cuMemcpyDtoD_v2, _ptds, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n),
          (touch_range_read(s, n), mark_range_written(d, n)))
GCR_WRAP2(cuMemcpyDtoDAsync_v2, _ptsz, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st),
          (d, s, n, st), (touch_range_read(s, n), mark_range_written(d, n)))
GCR_WRAP2(cuMemcpyPeer, _ptds, (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n),
          (d, dc, s, sc, n), (touch_range_read(s, n), mark_range_written(d, n)))
GCR_WRAP2(cuMemcpyPeerAsync, _ptsz,
          (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st),
          (d, dc, s, sc, n, st), (touch_range_read(s, n), mark_range_written(d, n)))
GCR_WRAP2(cuMemcpy2D_v2, _ptds, (const CUDA_MEMCPY2D* p), (p), (touch_2d_source(p), mark_2d(p)))
GCR_WRAP2(cuMemcpy2DUnaligned_v2, _ptds, (const CUDA_MEMCPY2D* p), (p),
          (touch_2d_source(p), mark_2d(p)))
GCR_WRAP2(cuMemcpy2DAsync_v2, _ptsz, (const CUDA_MEMCPY2D* p, CUstream st), (p, st),
          (touch_2d_source(p), mark_2d(p)))
GCR_WRAP2(cuMemcpy3D_v2, _ptds, (const CUDA_MEMCPY3D* p), (p), (touch_3d_source(p), mark_3d(p)))
GCR_WRAP2(cuMemcpy3DAsync_v2, _ptsz, (const CUDA_MEMCPY3D* p, CUstream st), (p, st),
          (touch_3d_source(p), mark_3d(p)))
GCR_WRAP2(cuMemcpy3DPeer, _ptds, (const CUDA_MEMCPY3D_PEER* p), (p), mark_all_written())
GCR_WRAP2(cuMemcpy3DPeerAsync, _ptsz, (const CUDA_MEMCPY3D_PEER* p, CUstream st), (p, st),
          mark_all_written())
GCR_WRAP2(cuMemcpyBatchAsync_v2, _ptsz,
          (CUdeviceptr * d, CUdeviceptr* s, size_t* n, size_t count, CUmemcpyAttributes* a,
           size_t* ai, size_t na, CUstream st),
          (d, s, n, count, a, ai, na, st), mark_all_written())

// Device memory only read: it counts for the first-touch order, and waits during an on-demand
// restore. The host memory written may be pinned (Note [Device writes to pinned host memory]).
GCR_WRAP2(cuMemcpyDtoH_v2, _ptds, (void* d, CUdeviceptr s, size_t n), (d, s, n),
          (touch_range_read(s, n), host_written(reinterpret_cast<std::uint64_t>(d), n)))
GCR_WRAP2(cuMemcpyDtoHAsync_v2, _ptsz, (void* d, CUdeviceptr s, size_t n, CUstream st),
          (d, s, n, st),
          (touch_range_read(s, n), host_written(reinterpret_cast<std::uint64_t>(d), n)))

// Copies between device memory and CUDA arrays: the array is the driver's, the device side gcr's.
GCR_WRAP2(cuMemcpyAtoD_v2, _ptds, (CUdeviceptr d, CUarray a, size_t o, size_t n), (d, a, o, n),
          mark_range_written(d, n))
GCR_WRAP2(cuMemcpyDtoA_v2, _ptds, (CUarray a, size_t o, CUdeviceptr s, size_t n), (a, o, s, n),
          touch_range_read(s, n))
// Decompression writes where its parameter array says: every region may be written.
GCR_WRAP2(cuMemBatchDecompressAsync, _ptsz,
          (CUmemDecompressParams * p, size_t n, unsigned f, size_t* e, CUstream st),
          (p, n, f, e, st), mark_all_written())

GCR_WRAP2(cuMemcpyAtoH_v2, _ptds, (void* d, CUarray a, size_t o, size_t n), (d, a, o, n),
          host_written(reinterpret_cast<std::uint64_t>(d), n))
GCR_WRAP2(cuMemcpyAtoHAsync_v2, _ptsz, (void* d, CUarray a, size_t o, size_t n, CUstream st),
          (d, a, o, n, st), host_written(reinterpret_cast<std::uint64_t>(d), n))

GCR_WRAP2(cuMemsetD8_v2, _ptds, (CUdeviceptr d, unsigned char v, size_t n), (d, v, n),
          mark_range_written(d, n))
GCR_WRAP2(cuMemsetD16_v2, _ptds, (CUdeviceptr d, unsigned short v, size_t n), (d, v, n),
          mark_range_written(d, 2 * n))
GCR_WRAP2(cuMemsetD32_v2, _ptds, (CUdeviceptr d, unsigned int v, size_t n), (d, v, n),
          mark_range_written(d, 4 * n))
GCR_WRAP2(cuMemsetD8Async, _ptsz, (CUdeviceptr d, unsigned char v, size_t n, CUstream st),
          (d, v, n, st), mark_range_written(d, n))
GCR_WRAP2(cuMemsetD16Async, _ptsz, (CUdeviceptr d, unsigned short v, size_t n, CUstream st),
          (d, v, n, st), mark_range_written(d, 2 * n))
GCR_WRAP2(cuMemsetD32Async, _ptsz, (CUdeviceptr d, unsigned int v, size_t n, CUstream st),
          (d, v, n, st), mark_range_written(d, 4 * n))
GCR_WRAP2(cuMemsetD2D8_v2, _ptds, (CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h),
          (d, p, v, w, h), mark_range_written(d, h ? (h - 1) * p + w : 0))
GCR_WRAP2(cuMemsetD2D16_v2, _ptds, (CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h),
          (d, p, v, w, h), mark_range_written(d, h ? (h - 1) * p + 2 * w : 0))
GCR_WRAP2(cuMemsetD2D32_v2, _ptds, (CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h),
          (d, p, v, w, h), mark_range_written(d, h ? (h - 1) * p + 4 * w : 0))
GCR_WRAP2(cuMemsetD2D8Async, _ptsz,
          (CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h, CUstream st),
          (d, p, v, w, h, st), mark_range_written(d, h ? (h - 1) * p + w : 0))
GCR_WRAP2(cuMemsetD2D16Async, _ptsz,
          (CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h, CUstream st),
          (d, p, v, w, h, st), mark_range_written(d, h ? (h - 1) * p + 2 * w : 0))
GCR_WRAP2(cuMemsetD2D32Async, _ptsz,
          (CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h, CUstream st),
          (d, p, v, w, h, st), mark_range_written(d, h ? (h - 1) * p + 4 * w : 0))

// A stream memory operation on shared memory is a communication launch (Note [A consistent cut]
// in cut.h): a peer's stream may wait on this write, or this wait on a peer's write. Counted and
// held like a kernel's, before the gate's scope.
#define GCR_WRAP_MEMOP(fn_type, name, params, args, comm_test, mark) \
  extern "C" CUresult name params {                                  \
    static const auto real = real_fn<fn_type>(#name);                \
    if (!g_unmanaged) {                                              \
      const bool comm = (comm_test);                                 \
      if (comm) [[unlikely]]                                         \
        cut_admit();                                                 \
      CUresult issued;                                               \
      {                                                              \
        GateScope gate;                                              \
        mark;                                                        \
        issued = real args;                                          \
      }                                                              \
      if (comm) [[unlikely]]                                         \
        cut_issued();                                                \
      return issued;                                                 \
    }                                                                \
    return real args;                                                \
  }
#define GCR_WRAP_MEMOP2(fn_type, name, suffix, params, args, comm_test, mark) \
  GCR_WRAP_MEMOP(fn_type, name, params, args, comm_test, mark)                \
  GCR_WRAP_MEMOP(fn_type, name##suffix, params, args, comm_test, mark)

GCR_WRAP_MEMOP2(decltype(&::cuStreamWriteValue32_v2), cuStreamWriteValue32_v2, _ptsz,
                (CUstream st, CUdeviceptr a, cuuint32_t v, unsigned f), (st, a, v, f),
                memop_comm(a), mark_written(a))
GCR_WRAP_MEMOP2(decltype(&::cuStreamWriteValue64_v2), cuStreamWriteValue64_v2, _ptsz,
                (CUstream st, CUdeviceptr a, cuuint64_t v, unsigned f), (st, a, v, f),
                memop_comm(a), mark_written(a))
GCR_WRAP_MEMOP2(decltype(&::cuStreamWaitValue32_v2), cuStreamWaitValue32_v2, _ptsz,
                (CUstream st, CUdeviceptr a, cuuint32_t v, unsigned f), (st, a, v, f),
                memop_comm(a), (void)0)
GCR_WRAP_MEMOP2(decltype(&::cuStreamWaitValue64_v2), cuStreamWaitValue64_v2, _ptsz,
                (CUstream st, CUdeviceptr a, cuuint64_t v, unsigned f), (st, a, v, f),
                memop_comm(a), (void)0)
GCR_WRAP_MEMOP2(decltype(&::cuStreamBatchMemOp_v2), cuStreamBatchMemOp_v2, _ptsz,
                (CUstream st, unsigned n, CUstreamBatchMemOpParams* p, unsigned f), (st, n, p, f),
                comm_memops(n, p), mark_all_written())

// Entry points that write where their arguments do not say, and the older ABIs of wrapped calls
// that the driver still exports under their first names (cuda.h declares only the newest: the
// memory operations before 11.7, the batched copies of 12.8): everything they may write is marked.
#undef cuStreamWriteValue32
#undef cuStreamWriteValue64
#undef cuStreamWaitValue32
#undef cuStreamWaitValue64
#undef cuStreamBatchMemOp
#undef cuMemcpyBatchAsync
#undef cuMemcpy3DBatchAsync

namespace gcr::interpose::legacy {
using MemcpyBatch_12_8 = CUresult (*)(CUdeviceptr*, CUdeviceptr*, size_t*, size_t,
                                      CUmemcpyAttributes*, size_t*, size_t, size_t*, CUstream);
using Memcpy3DBatch_12_8 = CUresult (*)(size_t, CUDA_MEMCPY3D_BATCH_OP*, size_t*,
                                        unsigned long long, CUstream);
using Launch = CUresult (*)(CUfunction);
using LaunchGrid = CUresult (*)(CUfunction, int, int);
using LaunchGridAsync = CUresult (*)(CUfunction, int, int, CUstream);
using LaunchMultiDevice = CUresult (*)(CUDA_LAUNCH_PARAMS*, unsigned, unsigned);
}  // namespace gcr::interpose::legacy

#define GCR_WRAP_TYPED2(fn_type, name, suffix, params, args, mark) \
  GCR_WRAP_TYPED(fn_type, name, params, args, mark)                \
  GCR_WRAP_TYPED(fn_type, name##suffix, params, args, mark)

GCR_WRAP_MEMOP2(decltype(&::cuStreamWriteValue32_v2), cuStreamWriteValue32, _ptsz,
                (CUstream st, CUdeviceptr a, cuuint32_t v, unsigned f), (st, a, v, f),
                memop_comm(a), mark_written(a))
GCR_WRAP_MEMOP2(decltype(&::cuStreamWriteValue64_v2), cuStreamWriteValue64, _ptsz,
                (CUstream st, CUdeviceptr a, cuuint64_t v, unsigned f), (st, a, v, f),
                memop_comm(a), mark_written(a))
GCR_WRAP_MEMOP2(decltype(&::cuStreamWaitValue32_v2), cuStreamWaitValue32, _ptsz,
                (CUstream st, CUdeviceptr a, cuuint32_t v, unsigned f), (st, a, v, f),
                memop_comm(a), (void)0)
GCR_WRAP_MEMOP2(decltype(&::cuStreamWaitValue64_v2), cuStreamWaitValue64, _ptsz,
                (CUstream st, CUdeviceptr a, cuuint64_t v, unsigned f), (st, a, v, f),
                memop_comm(a), (void)0)
GCR_WRAP_MEMOP2(decltype(&::cuStreamBatchMemOp_v2), cuStreamBatchMemOp, _ptsz,
                (CUstream st, unsigned n, CUstreamBatchMemOpParams* p, unsigned f), (st, n, p, f),
                comm_memops(n, p), mark_all_written())
GCR_WRAP_TYPED2(legacy::MemcpyBatch_12_8, cuMemcpyBatchAsync, _ptsz,
                (CUdeviceptr * d, CUdeviceptr* s, size_t* n, size_t count, CUmemcpyAttributes* a,
                 size_t* ai, size_t na, size_t* fail, CUstream st),
                (d, s, n, count, a, ai, na, fail, st), mark_all_written())
GCR_WRAP_TYPED2(legacy::Memcpy3DBatch_12_8, cuMemcpy3DBatchAsync, _ptsz,
                (size_t n, CUDA_MEMCPY3D_BATCH_OP* ops, size_t* fail, unsigned long long f,
                 CUstream st),
                (n, ops, fail, f, st), mark_all_written())
GCR_WRAP_TYPED2(decltype(&::cuMemcpy3DBatchAsync_v2), cuMemcpy3DBatchAsync_v2, _ptsz,
                (size_t n, CUDA_MEMCPY3D_BATCH_OP* ops, unsigned long long f, CUstream st),
                (n, ops, f, st), mark_all_written())
GCR_WRAP_TYPED(legacy::Launch, cuLaunch, (CUfunction fn), (fn), mark_all_written())
GCR_WRAP_TYPED(legacy::LaunchGrid, cuLaunchGrid, (CUfunction fn, int w, int h), (fn, w, h),
               mark_all_written())
GCR_WRAP_TYPED(legacy::LaunchGridAsync, cuLaunchGridAsync,
               (CUfunction fn, int w, int h, CUstream st), (fn, w, h, st), mark_all_written())
GCR_WRAP_TYPED(legacy::LaunchMultiDevice, cuLaunchCooperativeKernelMultiDevice,
               (CUDA_LAUNCH_PARAMS * p, unsigned n, unsigned f), (p, n, f), mark_all_written())
