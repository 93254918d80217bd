// Kernel launches: the arguments are marshalled by the parameter layout of the image, device
// pointers among them translated to the simulator's alias (Note [Device memory]), and the
// kernel's CPU twin runs on the stream's worker, its blocks spread over SIMGPU_THREADS threads.
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "simgpu.h"
#include "twin.h"

using namespace gcr::simgpu;

namespace {

struct Args {
  std::vector<std::byte> buffer;  // the parameter buffer, as the GPU would see it
  std::vector<void*> argv;        // params[i] for the twin: pointers into buffer
};

CUresult marshal(const KernelInfo& k, void** params, void** extra, Args* out) {
  out->buffer.assign(k.param_bytes, std::byte{0});
  if (params) {
    for (std::size_t i = 0; i < k.params.size(); ++i) {
      if (!params[i]) return CUDA_ERROR_INVALID_VALUE;
      std::memcpy(out->buffer.data() + k.params[i].offset, params[i], k.params[i].size);
    }
  } else if (extra) {
    const void* buf = nullptr;
    std::size_t* size = nullptr;
    for (void** e = extra; *e != CU_LAUNCH_PARAM_END; e += 2) {
      if (*e == CU_LAUNCH_PARAM_BUFFER_POINTER)
        buf = e[1];
      else if (*e == CU_LAUNCH_PARAM_BUFFER_SIZE)
        size = static_cast<std::size_t*>(e[1]);
      else
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!buf || !size || *size < k.param_bytes) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(out->buffer.data(), buf, k.param_bytes);
  } else if (!k.params.empty()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Every aligned 8-byte word of a parameter that holds a device address is translated, which
  // covers pointer parameters and pointers inside struct parameters.
  for (const KernelParam& p : k.params) {
    for (std::uint32_t o = (p.offset + 7) / 8 * 8; o + 8 <= p.offset + p.size; o += 8) {
      std::uint64_t word;
      std::memcpy(&word, out->buffer.data() + o, 8);
      if (in_device_space(word)) {
        word += static_cast<std::uint64_t>(g_va.delta);
        std::memcpy(out->buffer.data() + o, &word, 8);
      }
    }
  }
  out->argv.resize(k.params.size());
  for (std::size_t i = 0; i < k.params.size(); ++i)
    out->argv[i] = out->buffer.data() + k.params[i].offset;
  return CUDA_SUCCESS;
}

void run_twin(TwinFn twin, TwinLaunch launch, Args& args) {
  unsigned long long blocks = 1ull * launch.grid[0] * launch.grid[1] * launch.grid[2];
  unsigned threads =
      static_cast<unsigned>(std::min<unsigned long long>(config().worker_threads, blocks));
  if (threads <= 1) {
    twin(&launch, args.argv.data());
    return;
  }
  std::vector<std::thread> pool;
  unsigned long long per = (blocks + threads - 1) / threads;
  for (unsigned t = 0; t < threads; ++t) {
    TwinLaunch part = launch;
    part.block_begin = static_cast<unsigned>(t * per);
    part.block_end = static_cast<unsigned>(std::min(blocks, (t + 1) * per));
    if (part.block_begin >= part.block_end) break;
    pool.emplace_back([twin, part, &args] { twin(&part, args.argv.data()); });
  }
  for (auto& th : pool) th.join();
}

CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                unsigned bz, unsigned shared, CUstream h, void** params, void** extra, bool ptsz) {
  SIMGPU_API_BEGIN();
  CUfunc_st* fn = resolve_function(f);
  if (!fn) return CUDA_ERROR_INVALID_HANDLE;
  if (!gx || !gy || !gz || !bx || !by || !bz) return CUDA_ERROR_INVALID_VALUE;
  if (1ull * bx * by * bz > 1024 || bz > 64 || gy > 65535 || gz > 65535)
    return CUDA_ERROR_INVALID_VALUE;
  if (shared > 232448) return CUDA_ERROR_INVALID_VALUE;
  if (params && extra) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  if (CUresult r = resolve_stream(h, ptsz, &s)) return r;
  if (s->ctx() != fn->module->ctx) return CUDA_ERROR_INVALID_HANDLE;
  if (!fn->twin) {
    log_once("twin:" + fn->info->name,
             "kernel " + fn->info->name + " has no CPU twin: the program must export " +
                 (fn->twin_symbol.empty() ? std::string("one (templates are not supported)")
                                          : fn->twin_symbol) +
                 " (simt.h's SIMT_TWIN, linked with -rdynamic)");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  auto args = std::make_shared<Args>();
  if (CUresult r = marshal(*fn->info, params, extra, args.get())) return r;
  TwinLaunch l{{gx, gy, gz}, {bx, by, bz}, shared, 0, 0, static_cast<long long>(g_va.delta)};
  TwinFn twin = fn->twin;
  enqueue(s, [twin, l, args] { run_twin(twin, l, *args); });
  return CUDA_SUCCESS;
}

CUresult launch_ex(const CUlaunchConfig* c, CUfunction f, void** params, void** extra, bool ptsz) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < c->numAttrs; ++i) {
    CUlaunchAttributeID id = c->attrs[i].id;
    if (id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && c->attrs[i].value.cooperative) {
      log_once("cooperative", "cooperative launches are not simulated");
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      auto& d = c->attrs[i].value.clusterDim;
      if (d.x * d.y * d.z > 1) {
        log_once("clusters", "thread block clusters are not simulated");
        return CUDA_ERROR_NOT_SUPPORTED;
      }
    }
    // Priorities, access policy windows, memory sync domains and the like change performance
    // only, which a simulator does not model.
  }
  return launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
                c->sharedMemBytes, c->hStream, params, extra, ptsz);
}

}  // namespace

extern "C" {

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                        CUstream h, void** params, void** extra) {
  return launch(f, gx, gy, gz, bx, by, bz, shared, h, params, extra, false);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                             unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                             CUstream h, void** params, void** extra) {
  return launch(f, gx, gy, gz, bx, by, bz, shared, h, params, extra, true);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  return launch_ex(config, f, params, extra, false);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params,
                               void** extra) {
  return launch_ex(config, f, params, extra, true);
}

}  // extern "C"
