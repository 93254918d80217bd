// The process's side of soft copy-on-write and of on-demand restore (Notes [Soft copy-on-write]
// and [On-demand restore] in gcr/cow_table.h): one table, two kinds.
//
// The agent thread begins and ends it (op_cow_*); application threads reach it from the write
// marking of launches, copies and memsets (regions.h) while g_cow_active is set. The table may be
// unmapped by op_cow_end while an application thread is about to read it, so readers count
// themselves in (g_users) and op_cow_end unmaps only after clearing g_table and seeing no reader.
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "agent_ops.h"
#include "config.h"
#include "cow.h"
#include "gcr/cow_table.h"
#include "real_driver.h"
#include "regions.h"

namespace gcr::interpose {

std::atomic<bool> g_cow_active{false};

namespace {
// The exit status of a restored process whose on-demand load could not complete (op_cow_end).
constexpr int kExitNotLoaded = 70;  // EX_SOFTWARE
}  // namespace
std::atomic<bool> g_touch_waits{false};

namespace {

using namespace std::chrono_literals;

// The process's copy of one region, made by the thread that moved its entry to `copying`.
struct Copy {
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr address = 0;
  std::uint64_t size = 0;
};

std::atomic<cow::TableHeader*> g_table{nullptr};
std::size_t g_table_bytes = 0;  // agent thread only
std::atomic<int> g_users{0};    // application threads reading g_table
std::vector<Copy> g_copies;     // by entry; sized by op_cow_begin before g_table is published
int g_handover = -1;  // gcrd's socket for copies (Note [Copies handed over]); set with g_table
// A private stream per context for the copies.
struct CopyStreams {
  RankedMutex mu{LockRank::copy_streams};
  std::map<CUcontext, CUstream> by_context GCR_GUARDED_BY(mu);
};
CopyStreams g_copy_streams;

class TableUse {
 public:
  TableUse() noexcept {
    g_users.fetch_add(1, std::memory_order_seq_cst);
    table_ = g_table.load(std::memory_order_seq_cst);
  }
  ~TableUse() { g_users.fetch_sub(1, std::memory_order_release); }
  TableUse(const TableUse&) = delete;
  TableUse& operator=(const TableUse&) = delete;
  cow::TableHeader* table() const { return table_; }

 private:
  cow::TableHeader* table_;
};

void release_copy(const RealDriver* real, Copy& c) {
  if (c.address) {
    real->cuMemUnmap(c.address, c.size);
    real->cuMemAddressFree(c.address, c.size);
  }
  if (c.handle) real->cuMemRelease(c.handle);
  c = Copy{};
}

CUstream copy_stream(const RealDriver* real, CUcontext ctx) {
  MutexLock lock(g_copy_streams.mu);
  auto it = g_copy_streams.by_context.find(ctx);
  if (it != g_copy_streams.by_context.end()) return it->second;
  CUstream s = nullptr;
  if (real->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return nullptr;
  g_copy_streams.by_context[ctx] = s;
  return s;
}

// Note [Copies handed over] (gcr/cow_table.h): sends the copy to gcrd at once; true when it went
// (the fd in flight holds the memory, and the process's own reference is dropped).
bool hand_over(const RealDriver* real, std::uint32_t index, Copy& c) {
  if (g_handover < 0) return false;
  int fd = -1;
  if (real->cuMemExportToShareableHandle(&fd, c.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                         0) != CUDA_SUCCESS)
    return false;
  cow::HandoverMessage m{index, 0, c.size};
  iovec iov{&m, sizeof m};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* h = CMSG_FIRSTHDR(&msg);
  h->cmsg_level = SOL_SOCKET;
  h->cmsg_type = SCM_RIGHTS;
  h->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(h), &fd, sizeof fd);
  ssize_t n;
  do n = ::sendmsg(g_handover, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  ::close(fd);
  if (n != static_cast<ssize_t>(sizeof m)) return false;
  release_copy(real, c);
  return true;
}

// Copies the entry's region into a new allocation of the process's own. No write to the region
// has been issued since the cut (every write comes through here first), so whatever stream the
// copy runs on, it reads the cut's bytes; the caller waits for it before issuing its write.
bool copy_region(std::uint32_t index, const cow::Entry& e) {
  const RealDriver* real = real_driver();
  CUcontext ctx = nullptr;
  if (real->cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) {
    std::vector<CUcontext> known = known_contexts();
    if (known.empty()) return false;
    ctx = known.front();
  }
  if (real->cuCtxPushCurrent_v2(ctx) != CUDA_SUCCESS) return false;
  Copy c;
  c.size = e.size;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = static_cast<int>(e.device);
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUstream stream = nullptr;
  CUresult r = real->cuMemCreate(&c.handle, c.size, &prop, 0);
  if (r == CUDA_SUCCESS) r = real->cuMemAddressReserve(&c.address, c.size, 0, 0, 0);
  if (r == CUDA_SUCCESS) r = real->cuMemMap(c.address, c.size, 0, c.handle, 0);
  if (r == CUDA_SUCCESS) r = real->cuMemSetAccess(c.address, c.size, &access, 1);
  if (r == CUDA_SUCCESS) r = (stream = copy_stream(real, ctx)) ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
  if (r == CUDA_SUCCESS) r = real->cuMemcpyDtoDAsync_v2(c.address, e.address, c.size, stream);
  if (r == CUDA_SUCCESS) r = real->cuStreamSynchronize(stream);
  CUcontext popped;
  real->cuCtxPopCurrent_v2(&popped);
  if (r != CUDA_SUCCESS) {
    if (config().log)
      std::fprintf(stderr,
                   "gcr: no copy of region 0x%llx for the checkpoint (%d): waiting for gcrd\n",
                   static_cast<unsigned long long>(e.address), static_cast<int>(r));
    release_copy(real, c);
    return false;
  }
  if (!hand_over(real, index, c)) g_copies[index] = c;  // else gcrd has it
  return true;
}

// Returns once the process may write the entry's region.
void before_write_entry(std::uint32_t index, cow::Entry& e) noexcept {
  // A load table's regions are waited for, never copied (they hold no bytes to protect yet).
  bool may_copy = config().cow_copy && !g_touch_waits.load(std::memory_order_relaxed);
  if (!may_copy && e.state.load(std::memory_order_acquire) == cow::kPending)
    e.wanted.store(1, std::memory_order_release);
  for (;;) {
    std::uint32_t s = e.state.load(std::memory_order_acquire);
    if (s == cow::kCopied || s == cow::kDone) return;
    if (s == cow::kPending && may_copy) {
      if (!e.state.compare_exchange_strong(s, cow::kCopying, std::memory_order_acq_rel)) continue;
      bool copied = copy_region(index, e);
      if (!copied) {
        // No memory for a copy: let gcrd read the region first, and wait for it.
        may_copy = false;
        e.wanted.store(1, std::memory_order_release);
      }
      e.state.store(copied ? cow::kCopied : cow::kPending, std::memory_order_release);
      cow::futex_wake_all(&e.state);
      if (copied) return;
      continue;
    }
    // pending (waiting for gcrd to read it), reading, or copying by another thread. Reading, in
    // a checkpoint's table: it is waited for (gcrd counts that of a shared allocation's views,
    // Note [Shared memory behind every view] in daemon/drain.h). A load's reading entry is
    // being loaded, at the pace gcrd was given.
    if (s == cow::kReading && !g_touch_waits.load(std::memory_order_relaxed) &&
        !e.wanted.load(std::memory_order_relaxed))
      e.wanted.store(1, std::memory_order_release);
    cow::futex_wait(&e.state, s, 100ms);
    if (!g_cow_active.load(std::memory_order_acquire)) return;  // gcrd ended it
  }
}

}  // namespace

void cow_before_write(std::uint32_t region_id) noexcept {
  Region& reg = g_regions[region_id];
  if (!reg.cow_entry.load(std::memory_order_acquire)) return;
  TableUse use;
  if (!use.table()) return;
  std::uint32_t e1 = reg.cow_entry.load(std::memory_order_acquire);
  if (!e1 || e1 > use.table()->count) return;
  before_write_entry(e1 - 1, cow::entries(use.table())[e1 - 1]);
  reg.cow_entry.store(0, std::memory_order_relaxed);  // later writes skip the table
}

void cow_before_write_all() noexcept {
  TableUse use;
  if (!use.table()) return;
  cow::Entry* entries = cow::entries(use.table());
  for (std::uint32_t i = 0; i < use.table()->count; ++i) before_write_entry(i, entries[i]);
}

Status op_cow_begin(UniqueFd table_fd, UniqueFd handover, std::uint32_t count) {
  if (g_table.load()) return Error{Errc::busy, "a copy-on-write drain is already in progress"};
  if (count == 0 || count > cow::kMaxEntries)
    return Error{Errc::invalid_argument, "cow_begin: bad entry count " + std::to_string(count)};
  std::size_t bytes = cow::table_bytes(count);
  struct stat st {};
  if (fstat(table_fd.get(), &st) != 0 || static_cast<std::uint64_t>(st.st_size) < bytes)
    return Error{Errc::invalid_argument,
                 "cow_begin: the table is smaller than " + std::to_string(count) + " entries need"};
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, table_fd.get(), 0);
  if (p == MAP_FAILED) return errno_error("mapping the copy-on-write table");
  auto* table = static_cast<cow::TableHeader*>(p);
  if (table->magic != cow::kTableMagic || table->version != cow::kTableVersion ||
      table->count != count || (table->kind != cow::kCopyOnWrite && table->kind != cow::kLoad)) {
    munmap(p, bytes);
    return Error{Errc::protocol,
                 "cow_begin: the table's header does not match (magic, version "
                 "or count): use the gcrd that matches this process's gcr"};
  }
  MutexLock lock(g_region_mu);
  std::map<std::uint64_t, std::uint32_t> by_address;
  for (std::uint32_t id : live_region_ids()) by_address[g_regions[id].address] = id;
  cow::Entry* entries = cow::entries(table);
  std::vector<std::uint32_t> linked;
  for (std::uint32_t i = 0; i < count; ++i) {
    auto it = by_address.find(entries[i].address);
    if (it == by_address.end() || g_regions[it->second].size != entries[i].size) {
      for (std::uint32_t id : linked) g_regions[id].cow_entry.store(0);
      munmap(p, bytes);
      char b[64];
      std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(entries[i].address));
      return Error{Errc::invalid_argument, std::string("cow_begin: entry ") + std::to_string(i) +
                                               " names region " + b + ", which this process " +
                                               "does not have (or not of that size)"};
    }
    linked.push_back(it->second);
  }
  g_copies.assign(count, Copy{});
  g_handover = table->kind == cow::kCopyOnWrite ? handover.release() : -1;
  for (std::uint32_t i = 0; i < count; ++i) g_regions[linked[i]].cow_entry.store(i + 1);
  g_table_bytes = bytes;
  g_table.store(table, std::memory_order_seq_cst);
  g_touch_waits.store(table->kind == cow::kLoad, std::memory_order_seq_cst);
  g_cow_active.store(true, std::memory_order_seq_cst);
  if (config().log)
    std::fprintf(stderr, "gcr: %s for %u regions\n",
                 table->kind == cow::kLoad ? "on-demand load" : "copy-on-write", count);
  return ok();
}

Result<CowCopy> op_cow_take(std::uint32_t index) {
  cow::TableHeader* table = g_table.load();
  if (!table) return Error{Errc::invalid_argument, "cow_take: no copy-on-write in progress"};
  if (index >= table->count)
    return Error{Errc::invalid_argument, "cow_take: no entry " + std::to_string(index)};
  cow::Entry& e = cow::entries(table)[index];
  std::uint32_t s = e.state.load(std::memory_order_acquire);
  if (s != cow::kCopied)
    return Error{Errc::invalid_argument, "cow_take: entry " + std::to_string(index) +
                                             " has no copy (state " + std::to_string(s) + ")"};
  const RealDriver* real = real_driver();
  Copy& c = g_copies[index];
  if (!c.handle)
    return Error{Errc::invalid_argument, "cow_take: entry " + std::to_string(index) +
                                             "'s copy was handed over on gcrd's socket"};
  int fd = -1;
  if (CUresult r = real->cuMemExportToShareableHandle(&fd, c.handle,
                                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0))
    return Error{Errc::driver, "cow_take: exporting the copy failed (" +
                                   std::to_string(static_cast<int>(r)) + ")"};
  CowCopy out{index, c.size, UniqueFd(fd)};
  release_copy(real, c);  // the fd holds the memory now
  return out;
}

void op_cow_end() {
  cow::TableHeader* table = g_table.load();
  if (!table) return;
  cow::Entry* entries = cow::entries(table);
  if (table->kind == cow::kLoad) {
    // An on-demand restore ends (gcrd's cow_end, or its session closing: gcrd died) with regions
    // not loaded: releasing the threads that wait for them would run the program on memory it
    // never got, to a wrong result. It ends here instead (docs/security.md); its checkpoint is
    // unchanged and can be restored again.
    std::uint32_t missing = 0;
    for (std::size_t i = 0; i < g_copies.size(); ++i)
      if (entries[i].state.load(std::memory_order_acquire) != cow::kDone) ++missing;
    if (missing) {
      std::fprintf(stderr,
                   "gcr: the restore ended with %u of this process's %zu regions not loaded "
                   "(did gcrd die?); ending the process rather than run it on memory it did not "
                   "get. Restore the checkpoint again.\n",
                   missing, g_copies.size());
      std::fflush(stderr);
      _exit(kExitNotLoaded);
    }
  }
  g_cow_active.store(false, std::memory_order_seq_cst);
  g_touch_waits.store(false, std::memory_order_seq_cst);
  for (std::uint32_t i = 0; i < table->count; ++i) {
    std::uint32_t s = entries[i].state.load();
    // A copy in progress finishes on its own; everything else needs nothing more from anyone.
    if (s != cow::kCopying) entries[i].state.store(cow::kDone);
    cow::futex_wake_all(&entries[i].state);
  }
  {
    MutexLock lock(g_region_mu);
    for (std::uint32_t id : live_region_ids()) g_regions[id].cow_entry.store(0);
  }
  g_table.store(nullptr, std::memory_order_seq_cst);
  while (g_users.load(std::memory_order_seq_cst) != 0) std::this_thread::sleep_for(1ms);
  const RealDriver* real = real_driver();
  for (Copy& c : g_copies) release_copy(real, c);
  g_copies.clear();
  if (g_handover >= 0) ::close(g_handover);
  g_handover = -1;
  munmap(table, g_table_bytes);
  g_table_bytes = 0;
}

}  // namespace gcr::interpose
