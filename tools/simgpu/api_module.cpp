// Modules, libraries, kernels and functions: images parsed for names and parameter layouts,
// each kernel bound to its CPU twin.
#include <dlfcn.h>

#include <climits>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

#include "simgpu.h"
#include "twin.h"

namespace gcr::simgpu {
namespace {

std::mutex g_mod_mu;
std::set<CUmod_st*> g_modules;

TwinFn find_twin(const std::string& symbol) {
  if (symbol.empty()) return nullptr;
  return reinterpret_cast<TwinFn>(dlsym(RTLD_DEFAULT, symbol.c_str()));
}

}  // namespace

CUresult parse_image(const void* image, ModuleImage* out) {
  if (!image) return CUDA_ERROR_INVALID_VALUE;
  const Config& c = config();
  auto parsed = parse_module_image(image, SIZE_MAX, c.sm_major * 10 + c.sm_minor);
  if (!parsed) {
    log_once("image:" + parsed.error().message, "module image rejected: " + parsed.error().message);
    return CUDA_ERROR_INVALID_IMAGE;
  }
  *out = std::move(parsed).value();
  return CUDA_SUCCESS;
}

CUresult load_module(CUctx_st* ctx, const ModuleImage& image, CUmod_st** out) {
  auto mod = std::make_unique<CUmod_st>();
  mod->ctx = ctx;
  mod->image = image;
  for (const KernelInfo& k : mod->image.kernels) {
    auto f = std::make_unique<CUfunc_st>();
    f->module = mod.get();
    f->info = &k;
    f->twin_symbol = twin_symbol_for(k.name);
    f->twin = find_twin(f->twin_symbol);
    mod->functions.push_back(std::move(f));
  }
  for (const GlobalInfo& g : mod->image.globals) {
    if (g.size == 0) continue;
    DevAddr d;
    if (CUresult r = heap_alloc(ctx->device, g.size, ctx, nullptr, &d)) {
      for (auto& [name, where] : mod->globals) (void)heap_free(where.first);
      return r;
    }
    std::memset(alias(d), 0, g.size);
    if (!g.init.empty())
      std::memcpy(alias(d), g.init.data(), std::min<std::uint64_t>(g.size, g.init.size()));
    mod->globals[g.name] = {d, g.size};
  }
  std::lock_guard lock(g_mod_mu);
  g_modules.insert(mod.get());
  *out = mod.release();
  return CUDA_SUCCESS;
}

void unload_module(CUmod_st* mod) {
  {
    std::lock_guard lock(g_mod_mu);
    if (!g_modules.erase(mod)) return;
  }
  for (auto& [name, where] : mod->globals) (void)heap_free(where.first);
  mod->magic = 0;
  for (auto& f : mod->functions) f->magic = 0;
  // Function handles stay allocated (a stale handle must fail, not crash): leak the shell.
  mod->functions.clear();
}

bool valid_module(CUmod_st* mod) {
  std::lock_guard lock(g_mod_mu);
  return mod && g_modules.count(mod);
}

void unload_context_modules(CUctx_st* ctx) {
  std::vector<CUmod_st*> doomed;
  {
    std::lock_guard lock(g_mod_mu);
    for (CUmod_st* m : g_modules)
      if (m->ctx == ctx) doomed.push_back(m);
  }
  for (CUmod_st* m : doomed) unload_module(m);
}

bool valid_function(CUfunction f) {
  return f && f->magic == 0x46554e31;
}

namespace {
CUresult library_module(CUlib_st* lib, CUctx_st* ctx, CUmod_st** out) {
  std::lock_guard lock(lib->mu);
  auto it = lib->modules.find(ctx);
  if (it != lib->modules.end() && valid_module(it->second)) {
    *out = it->second;
    return CUDA_SUCCESS;
  }
  ModuleImage image;
  if (CUresult r = parse_image(lib->image_copy.data(), &image)) return r;
  CUmod_st* mod;
  if (CUresult r = load_module(ctx, image, &mod)) return r;
  mod->library = lib;
  lib->modules[ctx] = mod;
  *out = mod;
  return CUDA_SUCCESS;
}
}  // namespace

CUfunc_st* resolve_function(CUfunction f) {
  if (!f) return nullptr;
  auto* k = reinterpret_cast<CUkern_st*>(f);
  if (k->magic == 0x4b524e31) {  // a CUkernel passed where a CUfunction is expected
    CUctx_st* ctx;
    CUmod_st* mod;
    if (require_context(&ctx) || library_module(k->library, ctx, &mod)) return nullptr;
    return k->index < mod->functions.size() ? mod->functions[k->index].get() : nullptr;
  }
  return valid_function(f) ? f : nullptr;
}

}  // namespace gcr::simgpu

using namespace gcr::simgpu;

namespace {

CUresult module_from_image(CUmodule* module, const void* image) {
  if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx;
  if (CUresult r = require_context(&ctx)) return r;
  ModuleImage parsed;
  if (CUresult r = parse_image(image, &parsed)) return r;
  return load_module(ctx, parsed, module);
}

bool read_file(const char* path, std::vector<std::byte>* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  out->resize(bytes.size() + 1);  // NUL-terminated, for PTX text
  std::memcpy(out->data(), bytes.data(), bytes.size());
  (*out)[bytes.size()] = std::byte{0};
  return true;
}

// The bytes an image declares itself to span, so that a library can keep a copy of it. The
// parser has already accepted the image, so these header fields are known to be consistent.
std::size_t module_image_size(const void* image) {
  auto* b = static_cast<const unsigned char*>(image);
  std::uint32_t magic;
  std::memcpy(&magic, b, 4);
  if (magic == 0x466243b1) {  // __fatBinC_Wrapper_t { int magic, version; const void* data; ... }
    const void* data;
    std::memcpy(&data, b + 8, sizeof data);
    return module_image_size(data);
  }
  if (magic == 0xba55ed50) {  // fatbin: u32 magic, u16 version, u16 header size, u64 payload size
    std::uint16_t header;
    std::uint64_t payload;
    std::memcpy(&header, b + 6, 2);
    std::memcpy(&payload, b + 8, 8);
    return header + payload;
  }
  if (b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' &&
      b[3] == 'F') {  // ELF64: the section table ends it
    std::uint64_t shoff;
    std::uint16_t shentsize, shnum;
    std::memcpy(&shoff, b + 0x28, 8);
    std::memcpy(&shentsize, b + 0x3a, 2);
    std::memcpy(&shnum, b + 0x3c, 2);
    return shoff + std::size_t{shentsize} * shnum;
  }
  return std::strlen(static_cast<const char*>(image)) + 1;  // PTX text
}

// The image a library keeps: the driver gets no size with it, so copy what the parser accepted
// by parsing once to validate, then keeping a copy of the bytes its own headers declare.
CUresult library_from_bytes(CUlibrary* library, const void* code, std::size_t known_size) {
  if (!library || !code) return CUDA_ERROR_INVALID_VALUE;
  ModuleImage image;
  if (CUresult r = parse_image(code, &image)) return r;
  auto lib = std::make_unique<CUlib_st>();
  std::size_t size = known_size ? known_size : module_image_size(code);
  if (size == 0) return CUDA_ERROR_INVALID_IMAGE;
  lib->image_copy.assign(static_cast<const std::byte*>(code),
                         static_cast<const std::byte*>(code) + size);
  lib->image_copy.push_back(std::byte{0});
  lib->kernel_names.reserve(image.kernels.size());
  for (const KernelInfo& k : image.kernels) lib->kernel_names.push_back(k.name);
  *library = lib.release();
  return CUDA_SUCCESS;
}

bool valid_library(CUlibrary lib) {
  return lib && lib->magic == 0x4c494231;
}

}  // namespace

extern "C" {

CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  SIMGPU_API_BEGIN();
  return module_from_image(module, image);
}

CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int, CUjit_option*,
                            void**) {
  SIMGPU_API_BEGIN();
  return module_from_image(module, image);  // JIT options do not apply to a simulated GPU
}

CUresult cuModuleLoadFatBinary(CUmodule* module, const void* fat) {
  SIMGPU_API_BEGIN();
  return module_from_image(module, fat);
}

CUresult cuModuleLoad(CUmodule* module, const char* path) {
  SIMGPU_API_BEGIN();
  if (!path) return CUDA_ERROR_INVALID_VALUE;
  std::vector<std::byte> bytes;
  if (!read_file(path, &bytes)) return CUDA_ERROR_FILE_NOT_FOUND;
  return module_from_image(module, bytes.data());
}

CUresult cuModuleUnload(CUmodule mod) {
  SIMGPU_API_BEGIN();
  if (!valid_module(mod)) return CUDA_ERROR_INVALID_HANDLE;
  {
    OutsideGate wait;
    drain_context(mod->ctx);  // queued launches may still use its functions
  }
  unload_module(mod);
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule mod, const char* name) {
  SIMGPU_API_BEGIN();
  if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_module(mod)) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& f : mod->functions)
    if (f->info->name == name) {
      *hfunc = f.get();
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_NOT_FOUND;
}

CUresult cuModuleGetFunctionCount(unsigned int* count, CUmodule mod) {
  SIMGPU_API_BEGIN();
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_module(mod)) return CUDA_ERROR_INVALID_HANDLE;
  *count = static_cast<unsigned>(mod->functions.size());
  return CUDA_SUCCESS;
}

CUresult cuModuleEnumerateFunctions(CUfunction* functions, unsigned int n, CUmodule mod) {
  SIMGPU_API_BEGIN();
  if (!functions) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_module(mod)) return CUDA_ERROR_INVALID_HANDLE;
  for (unsigned i = 0; i < n && i < mod->functions.size(); ++i)
    functions[i] = mod->functions[i].get();
  return CUDA_SUCCESS;
}

CUresult cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule mod, const char* name) {
  SIMGPU_API_BEGIN();
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_module(mod)) return CUDA_ERROR_INVALID_HANDLE;
  auto it = mod->globals.find(name);
  if (it == mod->globals.end()) return CUDA_ERROR_NOT_FOUND;
  if (dptr) *dptr = it->second.first;
  if (bytes) *bytes = it->second.second;
  return CUDA_SUCCESS;
}

CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option*, void**,
                           unsigned int, CUlibraryOption*, void**, unsigned int) {
  SIMGPU_API_BEGIN();
  return library_from_bytes(library, code, 0);
}

CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* path, CUjit_option*, void**,
                               unsigned int, CUlibraryOption*, void**, unsigned int) {
  SIMGPU_API_BEGIN();
  if (!path) return CUDA_ERROR_INVALID_VALUE;
  std::vector<std::byte> bytes;
  if (!read_file(path, &bytes)) return CUDA_ERROR_FILE_NOT_FOUND;
  return library_from_bytes(library, bytes.data(), bytes.size());
}

CUresult cuLibraryUnload(CUlibrary library) {
  SIMGPU_API_BEGIN();
  if (!valid_library(library)) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard lock(library->mu);
  for (auto& [ctx, mod] : library->modules)
    if (valid_module(mod)) {
      drain_context(ctx);
      unload_module(mod);
    }
  library->modules.clear();
  library->magic = 0;
  return CUDA_SUCCESS;
}

CUresult cuLibraryGetKernel(CUkernel* kernel, CUlibrary library, const char* name) {
  SIMGPU_API_BEGIN();
  if (!kernel || !name) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_library(library)) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard lock(library->mu);
  for (std::size_t i = 0; i < library->kernel_names.size(); ++i)
    if (library->kernel_names[i] == name) {
      auto& k = library->kernels[i];
      if (!k) {
        k = std::make_unique<CUkern_st>();
        k->library = library;
        k->index = i;
      }
      *kernel = k.get();
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_NOT_FOUND;
}

CUresult cuLibraryGetKernelCount(unsigned int* count, CUlibrary library) {
  SIMGPU_API_BEGIN();
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_library(library)) return CUDA_ERROR_INVALID_HANDLE;
  *count = static_cast<unsigned>(library->kernel_names.size());
  return CUDA_SUCCESS;
}

CUresult cuLibraryGetModule(CUmodule* module, CUlibrary library) {
  SIMGPU_API_BEGIN();
  if (!module) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_library(library)) return CUDA_ERROR_INVALID_HANDLE;
  CUctx_st* ctx;
  if (CUresult r = require_context(&ctx)) return r;
  return library_module(library, ctx, module);
}

CUresult cuLibraryGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary library, const char* name) {
  SIMGPU_API_BEGIN();
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_library(library)) return CUDA_ERROR_INVALID_HANDLE;
  CUctx_st* ctx;
  if (CUresult r = require_context(&ctx)) return r;
  CUmod_st* mod;
  if (CUresult r = library_module(library, ctx, &mod)) return r;
  auto it = mod->globals.find(name);
  if (it == mod->globals.end()) return CUDA_ERROR_NOT_FOUND;
  if (dptr) *dptr = it->second.first;
  if (bytes) *bytes = it->second.second;
  return CUDA_SUCCESS;
}

CUresult cuKernelGetFunction(CUfunction* func, CUkernel kernel) {
  SIMGPU_API_BEGIN();
  if (!func) return CUDA_ERROR_INVALID_VALUE;
  if (!kernel || kernel->magic != 0x4b524e31) return CUDA_ERROR_INVALID_HANDLE;
  CUfunc_st* f = resolve_function(reinterpret_cast<CUfunction>(kernel));
  if (!f) return current_context() ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_CONTEXT;
  *func = f;
  return CUDA_SUCCESS;
}

CUresult cuKernelGetName(const char** name, CUkernel kernel) {
  SIMGPU_API_BEGIN();
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  if (!kernel || kernel->magic != 0x4b524e31) return CUDA_ERROR_INVALID_HANDLE;
  *name = kernel->library->kernel_names[kernel->index].c_str();
  return CUDA_SUCCESS;
}

CUresult cuFuncGetName(const char** name, CUfunction f) {
  SIMGPU_API_BEGIN();
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  CUfunc_st* fn = resolve_function(f);
  if (!fn) return CUDA_ERROR_INVALID_HANDLE;
  *name = fn->info->name.c_str();
  return CUDA_SUCCESS;
}

CUresult cuFuncGetParamInfo(CUfunction f, size_t index, size_t* offset, size_t* size) {
  SIMGPU_API_BEGIN();
  CUfunc_st* fn = resolve_function(f);
  if (!fn) return CUDA_ERROR_INVALID_HANDLE;
  if (index >= fn->info->params.size()) return CUDA_ERROR_INVALID_VALUE;
  if (offset) *offset = fn->info->params[index].offset;
  if (size) *size = fn->info->params[index].size;
  return CUDA_SUCCESS;
}

CUresult cuKernelGetParamInfo(CUkernel k, size_t index, size_t* offset, size_t* size) {
  return cuFuncGetParamInfo(reinterpret_cast<CUfunction>(k), index, offset, size);
}

CUresult cuFuncGetModule(CUmodule* mod, CUfunction f) {
  SIMGPU_API_BEGIN();
  if (!mod) return CUDA_ERROR_INVALID_VALUE;
  CUfunc_st* fn = resolve_function(f);
  if (!fn) return CUDA_ERROR_INVALID_HANDLE;
  *mod = fn->module;
  return CUDA_SUCCESS;
}

CUresult cuFuncGetAttribute(int* value, CUfunction_attribute attr, CUfunction f) {
  SIMGPU_API_BEGIN();
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  CUfunc_st* fn = resolve_function(f);
  if (!fn) return CUDA_ERROR_INVALID_HANDLE;
  if (auto it = fn->attributes.find(attr); it != fn->attributes.end()) {
    *value = it->second;
    return CUDA_SUCCESS;
  }
  switch (attr) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *value = 1024;
      break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      *value = 32;
      break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
      *value = config().sm_major * 10 + config().sm_minor;
      break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *value = 49152;
      break;
    default:
      *value = 0;
      break;
  }
  return CUDA_SUCCESS;
}

CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute attr, int value) {
  SIMGPU_API_BEGIN();
  CUfunc_st* fn = resolve_function(f);
  if (!fn) return CUDA_ERROR_INVALID_HANDLE;
  fn->attributes[attr] = value;
  return CUDA_SUCCESS;
}

CUresult cuKernelSetAttribute(CUfunction_attribute attr, int value, CUkernel k, CUdevice) {
  return cuFuncSetAttribute(reinterpret_cast<CUfunction>(k), attr, value);
}

CUresult cuKernelGetAttribute(int* value, CUfunction_attribute attr, CUkernel k, CUdevice) {
  return cuFuncGetAttribute(value, attr, reinterpret_cast<CUfunction>(k));
}

CUresult cuFuncSetCacheConfig(CUfunction f, CUfunc_cache) {
  SIMGPU_API_BEGIN();
  return resolve_function(f) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

}  // extern "C"
