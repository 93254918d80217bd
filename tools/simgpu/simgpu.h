// simgpu's internal model: the devices, the one device address space, and the driver objects
// behind the opaque CUDA handles. Every api_*.cpp file works on these; nothing here is exported.
//
// Note [Device memory]
// One range of host virtual addresses, reserved PROT_NONE at start, is the simulated GPU's
// unified device address space: a host dereference of a device pointer faults, as on a GPU. Its
// bytes live in memfds mapped at an alias range of the same size, at a constant offset
// (`g_va.delta`): the simulator (copies, memsets, kernel twins) reaches device address d at
// host address d + delta. cuMemAlloc* memory comes from one heap memfd; every cuMemCreate
// allocation is a memfd of its own, so it can be exported as a POSIX fd and imported by another
// process. Kernel twins receive their pointer arguments translated to the alias; a device pointer
// stored in device memory is not, and a twin follows it through simt.h's simt_follow_ptr, which
// adds the delta simgpu passes in every launch (TwinLaunch::alias_delta).
//
// Note [Shared device memory]
// Memory crosses processes three ways, all of them memfds reached through /proc/<pid>/fd:
// cuMemExportToShareableHandle hands out a dup of a cuMemCreate memfd; cuIpcGetMemHandle names a
// range of the exporter's heap memfd (ipc_handles.h); an interprocess event is a small shared
// memfd of its own. The alias ranges are MADV_DONTFORK: a forked child (which may make no CUDA
// call, Note [Forked child]) does not keep the parent's device memory mapped, so "who maps this
// memfd" in /proc answers the sharing question the driver checkpoint asks (shared_memory.cpp).
#pragma once

#include <fcntl.h>

#include <cuda.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gcr/unique_fd.h"
#include "module_image.h"

namespace gcr::simgpu {

using DevAddr = std::uint64_t;

inline constexpr std::uint64_t kGranularity = 2ull << 20;  // VMM granularity, as on Hopper
inline constexpr std::uint64_t kHeapAlign = 512;           // cuMemAlloc alignment
inline constexpr int kDriverVersion = 13000;

struct Config {
  int device_count = 2;
  std::uint64_t memory_bytes = 16ull << 30;  // per device
  std::vector<CUuuid> uuids;                 // one per device
  std::string name = "NVIDIA H200 (simgpu)";
  int sm_major = 9, sm_minor = 0;
  int multiprocessors = 132;
  int worker_threads = 1;  // CPU threads a kernel twin's blocks are spread over
};
const Config& config();  // read once from SIMGPU_* environment variables

// SIMGPU_DMA_CHECK=1 (dma_check.cpp): ends the process when a device write (copy, memset, memory
// operation) to pinned host memory finds its page write-protected by a userfaultfd, which a GPU's
// DMA would pass unseen. Called where such a write executes.
void check_device_write_to_host(const void* p, std::size_t n);

// Logging: SIMGPU_LOG=1 traces; warnings always go to stderr once per message key.
void log_once(const std::string& key, const std::string& message);

// ---- the API gate: the driver lock of the checkpoint API ------------------------------------
// Every exported call (but error strings, versions and the checkpoint calls) passes the gate. A
// lock closes it: new calls block until unlock; the locker waits for calls already inside.
class Gate {
 public:
  void enter() noexcept;
  void exit() noexcept;
  // Closes the gate and waits for calls inside to leave; false (gate reopened) on timeout.
  bool lock(unsigned timeout_ms) noexcept;
  void unlock() noexcept;
  bool locked() const noexcept;
  // In a forked child: no thread of the child is inside the gate or holds its lock.
  void reset_in_child() noexcept { state_.store(0, std::memory_order_relaxed); }

 private:
  static constexpr std::uint32_t kLocked = 1u << 31;
  std::atomic<std::uint32_t> state_{0};  // kLocked | calls inside
};
extern Gate g_gate;
extern std::atomic<bool> g_initialized;

// Note [Forked child]: a child forked after cuInit inherits simgpu's host state but none of its
// threads, nor its device memory (the alias is MADV_DONTFORK), so a call that
// waits for a stream worker would wait forever. The driver refuses every call in such a child
// with CUDA_ERROR_NOT_INITIALIZED, cuInit included (the runtime's "initialization error"); so does
// simgpu, from the pthread_atfork child handler that cuInit registers. A child of a process that
// never called cuInit is a fresh process to simgpu.
extern std::atomic<bool> g_forked_child;
void refuse_in_forked_children();  // called once, by the first successful cuInit

// Scope of one API call. A call that blocks for the GPU (synchronize) steps out of the gate
// while it waits, so that a lock is never held up by a waiting thread (OutsideGate).
class ApiCall {
 public:
  explicit ApiCall(bool needs_init = true) noexcept;
  ~ApiCall() { g_gate.exit(); }
  CUresult status() const noexcept { return status_; }

 private:
  CUresult status_ = CUDA_SUCCESS;
};
class OutsideGate {
 public:
  OutsideGate() noexcept { g_gate.exit(); }
  ~OutsideGate() { g_gate.enter(); }
};

#define SIMGPU_API_BEGIN()             \
  ::gcr::simgpu::ApiCall simgpu_call_; \
  if (simgpu_call_.status() != CUDA_SUCCESS) return simgpu_call_.status()

// ---- devices and memory ----------------------------------------------------------------------
struct VaSpace {
  DevAddr base = 0;  // device addresses [base, base + size)
  std::uint64_t size = 0;
  std::intptr_t delta = 0;  // alias = device address + delta
  DevAddr heap_base = 0;    // cuMemAlloc heap: [heap_base, heap_base + heap_size)
  std::uint64_t heap_size = 0;
  DevAddr vmm_base = 0;  // cuMemAddressReserve area
  std::uint64_t vmm_size = 0;
};
extern VaSpace g_va;

inline std::byte* alias(DevAddr d) {
  return reinterpret_cast<std::byte*>(d + g_va.delta);
}
inline bool in_device_space(DevAddr d) {
  return d >= g_va.base && d - g_va.base < g_va.size;
}

struct Device {
  int ordinal = 0;
  std::atomic<std::uint64_t> used_bytes{0};
  struct CUctx_st* primary = nullptr;
  int primary_refs = 0;
  unsigned primary_flags = 0;
  struct CUmemPoolHandle_st* default_pool = nullptr;
};
Device& device(int ordinal);
bool valid_device(CUdevice d);
// The physical (simulated) GPU behind a device ordinal of this process: the identity until a
// restore with gpuPairs moves the process (Note [Migration keeps ordinals]).
int physical_device(int ordinal);
int ordinal_of_physical(int physical);  // -1 if no ordinal of this process stands for it
void set_physical_devices(const std::vector<int>& physical_by_ordinal);

// Reserves bytes on a device, failing with CUDA_ERROR_OUT_OF_MEMORY past its capacity.
CUresult charge_device(int ordinal, std::uint64_t bytes);
void uncharge_device(int ordinal, std::uint64_t bytes);

// A physical allocation made by cuMemCreate or imported from another process: a memfd.
struct PhysAlloc {
  std::uint64_t id = 0;  // the CUmemGenericAllocationHandle
  UniqueFd fd;
  std::uint64_t size = 0;
  int device = 0;
  unsigned handle_types = 0;  // CUmemAllocationHandleType bits it may be exported as
  bool imported = false;      // charged to the exporting process, not this one
  bool ipc = false;           // a cuIpcOpenMemHandle window onto another process's heap memfd
  bool exported = false;      // handed out as a POSIX fd at least once
  int handle_refs = 1;        // cuMemCreate/Import/Retain minus cuMemRelease
  int mappings = 0;
  std::vector<std::byte> saved;  // contents while the process is checkpointed
};

// One cuMemAlloc-family allocation in the heap.
struct HeapAlloc {
  DevAddr addr = 0;
  std::uint64_t size = 0;
  int device = 0;
  struct CUctx_st* ctx = nullptr;
  struct CUmemPoolHandle_st* pool = nullptr;
  std::uint64_t buffer_id = 0;
  bool ipc_exported = false;  // cuIpcGetMemHandle was called on it
};

// One cuIpcOpenMemHandle result: the importer's window, opened `refs` times by `ctx`.
struct IpcOpening {
  DevAddr addr = 0;      // what cuIpcOpenMemHandle returned
  DevAddr map_addr = 0;  // the page-aligned mapping holding it
  std::uint64_t map_size = 0;
  CUctx_st* ctx = nullptr;
  int refs = 1;
  int exporter = 0;  // pid
  std::uint64_t inode = 0, offset = 0, alloc_id = 0;
};

// One cuMemMap: [addr, addr + size) shows phys bytes [offset, offset + size).
struct VmmMapping {
  DevAddr addr = 0;
  std::uint64_t size = 0;
  std::shared_ptr<PhysAlloc> phys;
  std::uint64_t offset = 0;
  unsigned access = 0;  // CU_MEM_ACCESS_FLAGS_PROT_* granted by cuMemSetAccess
};

struct VaReservation {
  DevAddr addr = 0;
  std::uint64_t size = 0;
};

// A resolved device range: where it lives and whether the simulator may read/write it.
struct DeviceRange {
  DevAddr start = 0;  // start of the allocation or mapping holding the address
  std::uint64_t size = 0;
  int device = 0;
  bool readable = false, writable = false;
  const HeapAlloc* heap = nullptr;
  const VmmMapping* mapping = nullptr;
  // The memfd behind [d, d + bytes) and d's offset in it, where one VMM mapping holds all of it
  // (Note [Copies into device memory]); null otherwise.
  std::shared_ptr<PhysAlloc> file;
  std::uint64_t file_offset = 0;
};

struct MemoryState {
  std::mutex mu;
  std::map<DevAddr, HeapAlloc> heap_allocs;    // by address
  std::map<DevAddr, std::uint64_t> heap_free;  // free ranges of the heap, by address
  UniqueFd heap_fd;
  std::map<std::uint64_t, std::shared_ptr<PhysAlloc>> phys;  // live handles, by id
  std::map<DevAddr, VmmMapping> mappings;
  std::map<DevAddr, VaReservation> reservations;
  std::map<DevAddr, std::uint64_t> vmm_free;  // unreserved parts of the VMM area
  std::map<std::uintptr_t, std::pair<std::uint64_t, unsigned>> host_allocs;  // pinned: size, flags
  std::uint64_t next_id = 1;
  std::vector<std::shared_ptr<PhysAlloc>> orphans;  // released handles still mapped
  std::map<DevAddr, IpcOpening> ipc_openings;       // by the address returned
};
extern MemoryState g_mem;

// Finds the device range holding [d, d + bytes); nullopt-like false when none does.
bool find_device_range(DevAddr d, std::uint64_t bytes, DeviceRange* out);
// Is [p, p + bytes) inside pinned (page-locked) host memory known to the driver?
bool is_pinned_host(const void* p, std::uint64_t bytes);

CUresult init_memory();
// The VMM area's free ranges: take (first fit, aligned, or exactly at `want`) and give back.
bool take_va(std::uint64_t size, std::uint64_t align, DevAddr want, DevAddr* out);
void give_va(DevAddr addr, std::uint64_t size);
// Note [Copies into device memory]
// A copy from host memory into device memory that one memfd holds is written to the memfd
// (pwrite) rather than through the alias mapping. The bytes are the same (the mapping shows the
// file's pages), but the kernel then allocates each new page of the memfd without clearing it
// first and without a page fault per 4 KiB: a restore's load of a fresh allocation spent more
// than half its time in those (clear_page_erms, exc_page_fault), which a GPU, whose memory is
// allocated by cuMemCreate and written by its copy engine, does not. The driver checkpoint's
// restore writes its saved bytes the same way. A write that fails falls back to the mapping, and
// so does every write while RLIMIT_FSIZE is set (a file write past it raises SIGXFSZ, a store
// through a mapping does not).
// Writes n bytes of src at offset of fd (pwrite, as often as it takes); false on an error.
bool write_file(int fd, std::uint64_t offset, const std::byte* src, std::uint64_t n);
bool file_writes_unlimited();  // RLIMIT_FSIZE is unlimited

// Maps [addr, addr+size) of the alias to fd at offset with prot; or back to PROT_NONE.
bool map_alias(DevAddr addr, std::uint64_t size, int fd, std::uint64_t offset, int prot);
void unmap_alias(DevAddr addr, std::uint64_t size);
int prot_of(unsigned access);
UniqueFd make_memfd(const char* name, std::uint64_t size);
// The seals of an exportable allocation's memfd: its size is fixed for every holder.
inline constexpr int kSizeSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
bool seal_size(int fd);
CUresult heap_alloc(int device, std::uint64_t bytes, struct CUctx_st* ctx,
                    struct CUmemPoolHandle_st* pool, DevAddr* out);
CUresult heap_free(DevAddr d);
void free_context_memory(struct CUctx_st* ctx);

// Note [Shared device memory]: a descriptor of another process, opened through
// /proc/<pid>/fd/<fd> and accepted only if it is still the file of that inode; or why not
// (CUDA_ERROR_INVALID_HANDLE: gone or another file; CUDA_ERROR_MAP_FAILED: not ours to open).
CUresult open_peer_fd(int pid, int fd, std::uint64_t inode, UniqueFd* out);
std::uint64_t inode_of(int fd);
// Why the driver checkpoint cannot take this process's memory, or CUDA_SUCCESS: memory shared
// with another process, which drivers before 610 refuse (CUDA_ERROR_NOT_SUPPORTED). Holds g_mem.mu.
CUresult refuse_shared_memory_locked();

// Driver checkpoint of this process: device memory into host memory, memfds closed; and back.
// memory_checkpoint refuses memory shared with another process (shared_memory.cpp).
CUresult memory_checkpoint();
CUresult memory_restore();

// ---- contexts, streams, events ---------------------------------------------------------------
class Stream;
struct SharedEventState;  // ipc.h
}  // namespace gcr::simgpu

struct CUctx_st {
  std::uint32_t magic = 0x43545831;  // "CTX1"
  int device = 0;
  unsigned flags = 0;
  bool primary = false;
  bool destroyed = false;
  std::uint64_t id = 0;
  std::mutex mu;                              // guards streams
  std::vector<gcr::simgpu::Stream*> streams;  // every live stream of this context
  gcr::simgpu::Stream* legacy = nullptr;      // the NULL stream
  std::map<int, std::size_t> limits;
};

struct CUevent_st {
  std::uint32_t magic = 0x45565431;  // "EVT1"
  unsigned flags = 0;
  CUctx_st* ctx = nullptr;
  std::mutex mu;
  gcr::simgpu::Stream* stream = nullptr;  // of the last record; null: never recorded
  std::uint64_t seq = 0;                  // completes when stream reaches seq
  std::chrono::steady_clock::time_point when{};
  bool timed = false;
  // CU_EVENT_INTERPROCESS: the event's state lives in a memfd other processes map too.
  gcr::simgpu::SharedEventState* shared = nullptr;
  gcr::UniqueFd shared_fd;
};

struct CUmemPoolHandle_st {
  std::uint32_t magic = 0x504f4f31;  // "POO1"
  int device = 0;
  std::uint64_t release_threshold = 0;
  std::atomic<std::uint64_t> used{0}, high{0};
};

namespace gcr::simgpu {

// A stream: an in-order queue of operations run by one worker thread.
// Note [Legacy stream]: an operation on the legacy NULL stream waits for all work submitted
// before it to blocking streams of its context, and work submitted afterwards to a blocking
// stream waits for it; non-blocking streams are exempt. Both are expressed as dependencies
// (stream, sequence number) that the worker waits for before running the operation.
class Stream {
 public:
  enum class Kind { created, legacy, per_thread };
  Stream(CUctx_st* ctx, Kind kind, unsigned flags, int priority);
  ~Stream();  // drains, then stops the worker
  // cuStreamDestroy: returns at once; the worker runs what is queued, then leaves the context's
  // stream list and exits. The object is never freed (a stale handle must fail, not crash).
  void retire();
  bool retired() const { return retired_; }  // read with ctx()->mu held

  struct Dep {
    Stream* stream;
    std::uint64_t seq;
  };
  // Queues op after deps; returns its sequence number.
  std::uint64_t submit(std::function<void()> op, std::vector<Dep> deps = {});
  void wait(std::uint64_t seq);  // blocks until seq has completed
  // Waits as wait() does, but not past deadline; false if seq has not completed by then.
  bool wait_until(std::uint64_t seq, std::chrono::steady_clock::time_point deadline);
  void drain() { wait(submitted()); }
  bool reached(std::uint64_t seq) const { return completed_.load() >= seq; }
  std::uint64_t submitted() const;
  bool idle() const { return reached(submitted()); }

  CUctx_st* ctx() const { return ctx_; }
  Kind kind() const { return kind_; }
  unsigned flags() const { return flags_; }
  int priority() const { return priority_; }
  bool blocking() const { return !(flags_ & CU_STREAM_NON_BLOCKING); }
  std::uint64_t id() const { return id_; }
  std::uint32_t magic = 0x53545231;  // "STR1"

 private:
  void run();
  struct Op {
    std::uint64_t seq;
    std::function<void()> fn;
    std::vector<Dep> deps;
  };
  CUctx_st* ctx_;
  Kind kind_;
  unsigned flags_;
  int priority_;
  std::uint64_t id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;
  std::uint64_t next_seq_ = 0;
  std::atomic<std::uint64_t> completed_{0};
  bool stop_ = false;
  bool retired_ = false;  // guarded by ctx_->mu
  std::condition_variable done_cv_;
  std::thread worker_;
};

// Resolves a CUstream handle as the API call sees it (0, CU_STREAM_LEGACY,
// CU_STREAM_PER_THREAD, or a created stream). per_thread_default: the _ptsz/_ptds variant.
CUresult resolve_stream(CUstream h, bool per_thread_default, Stream** out);
// Queues op on s with the legacy-stream dependencies of Note [Legacy stream].
std::uint64_t enqueue(Stream* s, std::function<void()> op, std::vector<Stream::Dep> extra = {});
// Drains every stream of every context (checkpoint, cuCtxSynchronize of all).
void drain_all_streams();
bool drain_all_streams_until(std::chrono::steady_clock::time_point deadline);  // false: too late
void drain_context(CUctx_st* ctx);
void destroy_context_streams(CUctx_st* ctx);

// The current context of the calling thread (top of its stack); null if none.
CUctx_st* current_context();
CUresult require_context(CUctx_st** out);
bool valid_context(CUctx_st* ctx);
std::vector<CUctx_st*> all_contexts();

// ---- modules and kernels -------------------------------------------------------------------
using TwinFn = void (*)(const void* launch, void** params);
}  // namespace gcr::simgpu

struct CUfunc_st {
  std::uint32_t magic = 0x46554e31;  // "FUN1"
  struct CUmod_st* module = nullptr;
  const gcr::simgpu::KernelInfo* info = nullptr;
  gcr::simgpu::TwinFn twin = nullptr;  // null: no CPU twin exported by the program
  std::string twin_symbol;
  std::map<int, int> attributes;
};

struct CUmod_st {
  std::uint32_t magic = 0x4d4f4431;  // "MOD1"
  CUctx_st* ctx = nullptr;
  gcr::simgpu::ModuleImage image;
  std::vector<std::unique_ptr<CUfunc_st>> functions;  // one per kernel, same order
  std::map<std::string, std::pair<gcr::simgpu::DevAddr, std::uint64_t>> globals;
  struct CUlib_st* library = nullptr;
};

struct CUlib_st {
  std::uint32_t magic = 0x4c494231;  // "LIB1"
  std::vector<std::byte> image_copy;
  std::vector<std::string> kernel_names;
  std::mutex mu;
  std::map<CUctx_st*, CUmod_st*> modules;                            // loaded lazily per context
  std::map<std::size_t, std::unique_ptr<struct CUkern_st>> kernels;  // by kernel index
};

namespace gcr::simgpu {
// Parses an image (fatbin, cubin or PTX) for this GPU, or says why not.
CUresult parse_image(const void* image, ModuleImage* out);
// Makes a module of a parsed image in ctx: functions with their twins, globals allocated.
CUresult load_module(CUctx_st* ctx, const ModuleImage& image, CUmod_st** out);
// The function a CUfunction or CUkernel handle names in the current context; null if invalid.
CUfunc_st* resolve_function(CUfunction f);
void unload_module(CUmod_st* mod);
bool valid_function(CUfunction f);
bool valid_module(CUmod_st* mod);
void unload_context_modules(CUctx_st* ctx);

// ---- the checkpoint worker -----------------------------------------------------------------
// Started by cuInit: the thread inside this process that performs driver checkpoint requests of
// other processes (cuCheckpointProcess*), found by them through a memfd mailbox.
CUresult start_checkpoint_worker();

}  // namespace gcr::simgpu

struct CUkern_st {
  std::uint32_t magic = 0x4b524e31;  // "KRN1"
  CUlib_st* library = nullptr;
  std::size_t index = 0;  // kernel index in the library's image
};
