// Copies and memsets in every direction, synchronous and stream-ordered.
//
// Host-side semantics follow the driver's documentation: a synchronous call runs on the legacy
// (or, for _ptds, the per-thread) default stream and returns when done; an async copy from
// pageable host memory reads the source before returning (it is staged); an async copy to
// pageable host memory completes before returning; copies involving pinned memory are fully
// asynchronous.
#include <cstring>
#include <memory>
#include <vector>

#include "gcr/background.h"
#include "simgpu.h"

using namespace gcr::simgpu;

namespace {

struct Endpoint {
  std::byte* ptr = nullptr;
  bool device = false;
  bool pinned = false;
  std::shared_ptr<PhysAlloc> file;  // device memory: its memfd, where one mapping holds the range
  std::uint64_t file_offset = 0;
};

enum class Want { any, device, host };

CUresult endpoint(std::uintptr_t p, std::size_t n, bool write, Want want, Endpoint* out) {
  if (n == 0) {
    *out = Endpoint{};
    out->ptr = reinterpret_cast<std::byte*>(p);
    out->device = in_device_space(p);
    return CUDA_SUCCESS;
  }
  if (in_device_space(p)) {
    if (want == Want::host) return CUDA_ERROR_INVALID_VALUE;
    DeviceRange r;
    if (!find_device_range(p, n, &r)) return CUDA_ERROR_INVALID_VALUE;
    if (write ? !r.writable : !r.readable) return CUDA_ERROR_INVALID_VALUE;
    *out = {
        .ptr = alias(p), .device = true, .file = std::move(r.file), .file_offset = r.file_offset};
    return CUDA_SUCCESS;
  }
  if (p == 0) return CUDA_ERROR_INVALID_VALUE;
  bool pinned = is_pinned_host(reinterpret_cast<void*>(p), n);
  // With unified addressing, a "device" pointer may name pinned host memory.
  if (want == Want::device && !pinned) return CUDA_ERROR_INVALID_VALUE;
  *out = Endpoint{};
  out->ptr = reinterpret_cast<std::byte*>(p);
  out->pinned = pinned;
  return CUDA_SUCCESS;
}

// One rectangular copy: height rows of width bytes, each advanced by its pitch.
struct Rect {
  std::size_t width = 0, height = 1, dst_pitch = 0, src_pitch = 0;
};

// Note [A copy engine takes no CPU]
// A GPU's copy engines move bytes by DMA, beside the CPUs; simgpu's stream threads move them with
// the host's CPU. A copy queued by a thread that runs at SCHED_IDLE (gcrd loading behind a restore,
// Note [Loading behind the restore] in daemon/loader.h) meant to take only CPU time nothing
// else wants, so its stream thread runs it at SCHED_IDLE too. Otherwise simgpu would take from
// CRIU's restore the CPU a GPU never takes: on 2 cores, 0.7 ms of every 1.5 ms while CRIU waited.
// Other copies and kernels run as the stream thread does, in the class it had (put back after the
// copy: gcr::BackgroundScope, which does not go where it could not come back from).
CUresult submit_copy(Endpoint dst, Endpoint src, Rect rect, Stream* s, bool wait) {
  if (rect.width == 0 || rect.height == 0) return CUDA_SUCCESS;
  if (!dst.device && !dst.pinned) wait = true;
  std::shared_ptr<std::vector<std::byte>> staged;
  if (!src.device && !src.pinned && !wait) {
    std::size_t span = (rect.height - 1) * rect.src_pitch + rect.width;
    staged = std::make_shared<std::vector<std::byte>>(src.ptr, src.ptr + span);
    src.ptr = staged->data();
  }
  std::uint64_t seq = enqueue(s, [dst, src, rect, staged, idle = gcr::in_background()] {
    gcr::BackgroundScope engine;  // Note [A copy engine takes no CPU]
    engine.set(idle);
    if (dst.pinned)
      check_device_write_to_host(dst.ptr, (rect.height - 1) * rect.dst_pitch + rect.width);
    // Note [Copies into device memory]
    if (dst.file && !src.device && rect.height == 1 && file_writes_unlimited() &&
        write_file(dst.file->fd.get(), dst.file_offset, src.ptr, rect.width))
      return;
    for (std::size_t row = 0; row < rect.height; ++row)
      std::memmove(dst.ptr + row * rect.dst_pitch, src.ptr + row * rect.src_pitch, rect.width);
  });
  if (wait) {
    OutsideGate outside;
    s->wait(seq);
  }
  return CUDA_SUCCESS;
}

CUresult copy(std::uintptr_t dst, Want dst_want, std::uintptr_t src, Want src_want, std::size_t n,
              CUstream h, bool per_thread, bool wait) {
  SIMGPU_API_BEGIN();
  Stream* s;
  if (CUresult r = resolve_stream(h, per_thread, &s)) return r;
  Endpoint d, sr;
  if (CUresult r = endpoint(dst, n, true, dst_want, &d)) return r;
  if (CUresult r = endpoint(src, n, false, src_want, &sr)) return r;
  return submit_copy(d, sr, Rect{n, 1, n, n}, s, wait);
}

CUresult endpoint_2d(CUmemorytype type, const void* host, CUdeviceptr dev, std::size_t x,
                     std::size_t y, std::size_t pitch, std::size_t width, std::size_t height,
                     bool write, Endpoint* out) {
  std::uintptr_t base;
  Want want;
  switch (type) {
    case CU_MEMORYTYPE_HOST:
      base = reinterpret_cast<std::uintptr_t>(host), want = Want::host;
      break;
    case CU_MEMORYTYPE_DEVICE:
      base = dev, want = Want::device;
      break;
    case CU_MEMORYTYPE_UNIFIED:
      base = dev, want = Want::any;
      break;
    case CU_MEMORYTYPE_ARRAY:
      log_once("arrays", "CUDA arrays are not simulated (cuMemcpy2D with an array operand)");
      return CUDA_ERROR_NOT_SUPPORTED;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  if (height > 1 && pitch < width) return CUDA_ERROR_INVALID_VALUE;
  std::size_t span = (height - 1) * pitch + width;
  return endpoint(base + y * pitch + x, span, write, want, out);
}

CUresult copy_2d(const CUDA_MEMCPY2D* p, CUstream h, bool per_thread, bool wait) {
  SIMGPU_API_BEGIN();
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  if (CUresult r = resolve_stream(h, per_thread, &s)) return r;
  Endpoint d, sr;
  if (CUresult r = endpoint_2d(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY,
                               p->dstPitch, p->WidthInBytes, p->Height, true, &d))
    return r;
  if (CUresult r = endpoint_2d(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY,
                               p->srcPitch, p->WidthInBytes, p->Height, false, &sr))
    return r;
  return submit_copy(d, sr, Rect{p->WidthInBytes, p->Height, p->dstPitch, p->srcPitch}, s, wait);
}

template <typename T>
CUresult memset_2d(CUdeviceptr dst, std::size_t pitch, T value, std::size_t width,
                   std::size_t height, CUstream h, bool per_thread, bool wait) {
  SIMGPU_API_BEGIN();
  if (dst % sizeof(T) != 0) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  if (CUresult r = resolve_stream(h, per_thread, &s)) return r;
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  std::size_t row_bytes = width * sizeof(T);
  if (height > 1 && pitch < row_bytes) return CUDA_ERROR_INVALID_VALUE;
  Endpoint d;
  if (CUresult r = endpoint(dst, (height - 1) * pitch + row_bytes, true, Want::any, &d)) return r;
  std::uint64_t seq = enqueue(s, [d, pitch, value, width, height] {
    if (d.pinned) check_device_write_to_host(d.ptr, (height - 1) * pitch + width * sizeof(T));
    for (std::size_t row = 0; row < height; ++row) {
      auto* p = reinterpret_cast<T*>(d.ptr + row * pitch);
      if constexpr (sizeof(T) == 1)
        std::memset(p, value, width);
      else
        for (std::size_t i = 0; i < width; ++i) p[i] = value;
    }
  });
  if (wait) {
    OutsideGate outside;
    s->wait(seq);
  }
  return CUDA_SUCCESS;
}

template <typename T>
CUresult memset_1d(CUdeviceptr dst, T value, std::size_t n, CUstream h, bool per_thread,
                   bool wait) {
  return memset_2d<T>(dst, n * sizeof(T), value, n, 1, h, per_thread, wait);
}

auto up(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p);
}

}  // namespace

extern "C" {

// ---- synchronous copies: legacy stream, or per-thread (_ptds) ----
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return copy(dst, Want::any, src, Want::any, n, nullptr, false, true);
}
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return copy(dst, Want::any, src, Want::any, n, nullptr, true, true);
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  return copy(dst, Want::device, up(src), Want::host, n, nullptr, false, true);
}
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t n) {
  return copy(dst, Want::device, up(src), Want::host, n, nullptr, true, true);
}
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  return copy(up(dst), Want::host, src, Want::device, n, nullptr, false, true);
}
CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t n) {
  return copy(up(dst), Want::host, src, Want::device, n, nullptr, true, true);
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return copy(dst, Want::device, src, Want::device, n, nullptr, false, true);
}
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return copy(dst, Want::device, src, Want::device, n, nullptr, true, true);
}
CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, size_t n) {
  return copy(dst, Want::device, src, Want::device, n, nullptr, false, true);
}
CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, size_t n) {
  return copy(dst, Want::device, src, Want::device, n, nullptr, true, true);
}
CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D* p) {
  return copy_2d(p, nullptr, false, true);
}
CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* p) {
  return copy_2d(p, nullptr, true, true);
}
CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* p) {
  return copy_2d(p, nullptr, false, true);
}
CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* p) {
  return copy_2d(p, nullptr, true, true);
}

// ---- stream-ordered copies ----
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) {
  return copy(dst, Want::any, src, Want::any, n, h, false, false);
}
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) {
  return copy(dst, Want::any, src, Want::any, n, h, true, false);
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream h) {
  return copy(dst, Want::device, up(src), Want::host, n, h, false, false);
}
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t n, CUstream h) {
  return copy(dst, Want::device, up(src), Want::host, n, h, true, false);
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream h) {
  return copy(up(dst), Want::host, src, Want::device, n, h, false, false);
}
CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t n, CUstream h) {
  return copy(up(dst), Want::host, src, Want::device, n, h, true, false);
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) {
  return copy(dst, Want::device, src, Want::device, n, h, false, false);
}
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) {
  return copy(dst, Want::device, src, Want::device, n, h, true, false);
}
CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, size_t n,
                           CUstream h) {
  return copy(dst, Want::device, src, Want::device, n, h, false, false);
}
CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, size_t n,
                                CUstream h) {
  return copy(dst, Want::device, src, Want::device, n, h, true, false);
}
CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* p, CUstream h) {
  return copy_2d(p, h, false, false);
}
CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* p, CUstream h) {
  return copy_2d(p, h, true, false);
}

// ---- memsets ----
CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) {
  return memset_1d<std::uint8_t>(d, v, n, nullptr, false, true);
}
CUresult cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n) {
  return memset_1d<std::uint8_t>(d, v, n, nullptr, true, true);
}
CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) {
  return memset_1d<std::uint16_t>(d, v, n, nullptr, false, true);
}
CUresult cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short v, size_t n) {
  return memset_1d<std::uint16_t>(d, v, n, nullptr, true, true);
}
CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n) {
  return memset_1d<std::uint32_t>(d, v, n, nullptr, false, true);
}
CUresult cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n) {
  return memset_1d<std::uint32_t>(d, v, n, nullptr, true, true);
}
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream h) {
  return memset_1d<std::uint8_t>(d, v, n, h, false, false);
}
CUresult cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream h) {
  return memset_1d<std::uint8_t>(d, v, n, h, true, false);
}
CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream h) {
  return memset_1d<std::uint16_t>(d, v, n, h, false, false);
}
CUresult cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream h) {
  return memset_1d<std::uint16_t>(d, v, n, h, true, false);
}
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream h) {
  return memset_1d<std::uint32_t>(d, v, n, h, false, false);
}
CUresult cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream h) {
  return memset_1d<std::uint32_t>(d, v, n, h, true, false);
}
CUresult cuMemsetD2D8_v2(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t ht) {
  return memset_2d<std::uint8_t>(d, pitch, v, w, ht, nullptr, false, true);
}
CUresult cuMemsetD2D16_v2(CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t ht) {
  return memset_2d<std::uint16_t>(d, pitch, v, w, ht, nullptr, false, true);
}
CUresult cuMemsetD2D32_v2(CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t ht) {
  return memset_2d<std::uint32_t>(d, pitch, v, w, ht, nullptr, false, true);
}
CUresult cuMemsetD2D8Async(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t ht,
                           CUstream h) {
  return memset_2d<std::uint8_t>(d, pitch, v, w, ht, h, false, false);
}
CUresult cuMemsetD2D16Async(CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t ht,
                            CUstream h) {
  return memset_2d<std::uint16_t>(d, pitch, v, w, ht, h, false, false);
}
CUresult cuMemsetD2D32Async(CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t ht,
                            CUstream h) {
  return memset_2d<std::uint32_t>(d, pitch, v, w, ht, h, false, false);
}

}  // extern "C"
