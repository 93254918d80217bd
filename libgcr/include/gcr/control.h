// The control channel between gcr's tools and a process running under gcr (docs/protocol.md).
//
// The interposer inside the process owns a Server: a 4 KiB memfd named "gcr-control" (the
// mailbox) and a thread that waits on it. A caller finds the mailbox through /proc/<pid>/fd, locks
// it, and names an abstract unix socket it listens on; the server connects there, and the two
// authenticate each other (SO_PEERCRED) and talk in framed, versioned messages. Nothing in the
// process listens on a fixed name and nothing in it stays connected to gcr between sessions, so
// CRIU can dump it, and restore one image twice at once (docs/protocol.md §1).
//
//   auto client = Client::connect(pid, std::chrono::seconds(5));
//   if (!client) return std::move(client).error();  // says what to do, e.g. "start it with 'gcr
//   run'" GCR_TRY(client->quiesce(std::chrono::seconds(10))); auto parked = client->park();    //
//   region records and their fds; the process keeps none GCR_TRY(client->close());        // before
//   CRIU dumps the process (docs/protocol.md §6)
//
// This header is the whole public surface: the types the protocol carries, the Client (gcr, gcrd,
// tests), the Handler a server dispatches to and the Server (the interposer, test fakes), and the
// /proc lookups `gcr ps` needs. It does not know the region table: the interposer implements
// Handler over interpose/agent_ops.h, so libgcr never depends on the interposer.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "gcr/result.h"
#include "gcr/unique_fd.h"

namespace gcr::control {

// The values are on the wire: fixed, append only.
enum class ProcessState : std::uint32_t { running = 0, quiesced = 1, parked = 2 };
// "running", "quiesced", "parked"; "unknown" otherwise.
const char* process_state_name(ProcessState state) noexcept;

// One region: a physical allocation mapped at [address, address + size) on `device`.
struct RegionRecord {
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  std::uint32_t device = 0;
  std::uint32_t flags = 0;  // kRegionDirty; readers ignore bits they do not know
  friend bool operator==(const RegionRecord&, const RegionRecord&) = default;
};
inline constexpr std::uint32_t kRegionDirty = 1u << 0;  // written since the last checkpoint epoch

// A region and its physical allocation, exported as a POSIX file descriptor.
struct ParkedRegion {
  RegionRecord region;
  UniqueFd fd;
};

// The process's private copy of a region written during a checkpoint's drain (soft copy-on-write,
// gcr/cow_table.h): an exported allocation of `size` bytes.
// Device memory this process shares with others (1.3), for a job's checkpoint (Note [Shared
// regions] in interpose/vmm_handles.h). Every process that maps one allocation reports, for the
// region that maps it, keys that name the allocation the same way in each of them: gcrd joins the
// processes' regions by key and stores the allocation once.
struct ShareRecord {
  std::uint64_t address = 0;  // the region (RegionRecord::address) in this process
  std::uint32_t flags = 0;    // kShareExported | kShareImported
  std::vector<std::uint64_t> keys;
  friend bool operator==(const ShareRecord&, const ShareRecord&) = default;
};
inline constexpr std::uint32_t kMaxShareKeys = 16;  // per record

// Host memory a device may write by DMA, past the page tables (protocol 1.4): what the program
// pinned through the driver (cuMemHostAlloc, cuMemAllocHost, cuMemHostRegister), including ranges
// it has since unregistered, which a device may have written before. Note [Host memory tracked
// between checkpoints] in daemon/host_tracking.h: gcrd takes these pages from the process
// at every checkpoint. `overflow`: the process pinned more ranges than it keeps (then gcrd does
// not track its host memory at all).
struct HostDmaRange {
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  friend bool operator==(const HostDmaRange&, const HostDmaRange&) = default;
};
struct HostDmaRanges {
  std::vector<HostDmaRange> ranges;
  bool overflow = false;
  // 1.5: the process writes each page of these ranges itself before a device may write it (Note
  // [Device writes to pinned host memory] in interpose/pinned.h): write protection sees those
  // writes, so the pages need no special care.
  bool touched = false;
  friend bool operator==(const HostDmaRanges&, const HostDmaRanges&) = default;
};
inline constexpr std::uint32_t kMaxHostDmaRanges = 65536;
// A file's identity (st_dev, st_ino) as a share key.
inline constexpr std::uint64_t share_key(std::uint64_t dev, std::uint64_t ino) {
  return (dev * 0x9E3779B97F4A7C15ull) ^ ino;
}
inline constexpr std::uint32_t kShareExported = 1u << 0;  // given to other processes from here
inline constexpr std::uint32_t kShareImported = 1u << 1;  // another process's memory, mapped here

// The counting gate of a job's cut (1.3, Note [A consistent cut] in interpose/cut.h).
enum class CutOp : std::uint32_t { begin = 1, target = 2, read = 3, end = 4 };
struct CutCounts {
  std::uint64_t admitted = 0;  // communication launches let through (some may still be issuing)
  std::uint64_t issued = 0;    // communication launches the driver has been given
  std::uint64_t target = 0;    // how many may be let through; ~0: no cut
  std::uint32_t waiting = 0;   // threads held at the gate's count now
};

struct CowCopy {
  std::uint32_t index = 0;  // the table entry
  std::uint64_t size = 0;
  UniqueFd fd;
};

struct StatusInfo {
  ProcessState state = ProcessState::running;
  std::uint64_t regions = 0;
  std::uint64_t region_bytes = 0;  // device memory held in regions
  std::uint64_t dirty_bytes = 0;   // in regions written since the last checkpoint epoch
  std::uint64_t requested_bytes =
      0;                        // what the program asked for (slab overhead = region - requested)
  std::uint64_t epoch = 0;      // checkpoint epoch; a checkpoint cut starts a new one
  std::string last_checkpoint;  // id of the last checkpoint taken, empty if none
  bool conservative = false;    // write tracking treats every launch as writing everything
  // The program registered host memory with the driver (cuMemHostRegister): a device may write
  // it by DMA, past the page tables (Note [Host memory tracked between checkpoints]).
  bool host_registered = false;
};

// What the server said about itself when the connection opened.
struct ServerInfo {
  std::uint16_t minor = 0;  // the protocol minor version it speaks
  std::uint32_t pid = 0;    // in the server's own pid namespace
  ProcessState state = ProcessState::running;
  std::uint32_t uid = 0;
  std::string software;
};

// ---- caller side ------------------------------------------------------------------------------

class Channel;         // a connected socket carrying framed messages (libgcr/control/channel.h)
struct MailboxLayout;  // libgcr/control/mailbox.h

// One session with one process. Sessions are exclusive: a second Client::connect to the same
// process waits (up to its timeout) until the first is closed. Move-only; not for concurrent use
// by several threads. Every method fails with a message naming the process and what to do.
class Client {
 public:
  static constexpr std::chrono::milliseconds kDefaultReplyTimeout{60'000};

  // Finds the mailbox of `pid` (as this process sees it), waits for the session lock, and meets
  // the process's agent thread on a fresh rendezvous socket; `timeout` bounds all of that.
  // Errors: not_found (no such process, it exited, or it is not running under gcr),
  // permission_denied (only root or the process owner may control it), busy (another gcr holds
  // the session past the timeout), timeout (the agent thread did not answer: process stopped or
  // frozen), unsupported (another protocol version), io_error.
  static Result<Client> connect(pid_t pid, std::chrono::milliseconds timeout);
  // As connect(), with the mailbox already open (open_mailbox(), or an fd handed over by a more
  // privileged process); the server still checks this process's credentials.
  static Result<Client> connect_mailbox(pid_t pid, UniqueFd mailbox,
                                        std::chrono::milliseconds timeout);

  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;
  // Drops the connection without a goodbye; the server then resumes a quiesced process.
  ~Client();

  pid_t pid() const noexcept { return pid_; }
  const ServerInfo& server() const noexcept { return server_; }
  // How long a reply may take (default kDefaultReplyTimeout; quiesce adds its own timeout).
  void set_reply_timeout(std::chrono::milliseconds timeout) noexcept { reply_timeout_ = timeout; }

  Result<StatusInfo> status();
  Result<std::vector<RegionRecord>> regions();
  // Closes the process's CUDA API gate and drains its GPU work; the process's timeout error
  // (Errc::timeout) leaves it running. A quiesced process is resumed by the server when the
  // session ends, however it ends, unless it was parked (docs/protocol.md §5).
  Status quiesce(std::chrono::milliseconds timeout);
  Status resume();
  // Requires quiesced. Returns every region with its allocation as an fd; the process keeps no
  // reference, so these fds are the only ones: losing them loses the data. Should this session
  // end before every batch arrived, the process maps its regions back.
  Result<std::vector<ParkedRegion>> park();
  // Requires parked: gives the regions of the park back (the fds are sent, not consumed; this side
  // keeps its own). The process ends quiesced; resume() lets it run.
  Status unpark(const std::vector<ParkedRegion>& regions);
  // Starts a new checkpoint epoch (dirty bits cleared) and records the checkpoint's id
  // (1..128 of [A-Za-z0-9._:-]).
  Status new_epoch(std::string_view checkpoint_id);
  // Soft copy-on-write (gcr/cow_table.h; protocol 1.1). cow_begin hands the process the table
  // (a memfd of cow::table_bytes(entries) bytes; the fd is sent, not consumed) for the regions of
  // the unpark just done: from then on the process copies a pending region before writing it.
  // cow_take asks for the copy of an entry in state `copied` (the process drops its own
  // reference once sent). cow_end ends it: the process frees copies not taken and forgets the
  // table. A session that ends without cow_end ends it too.
  // handover_fd (optional, 1.6): gcrd's socket for the process's copies (Note [Copies handed
  // over] in gcr/cow_table.h), sent only to a process that speaks 1.6.
  Status cow_begin(int table_fd, std::uint32_t entries, int handover_fd = -1);
  Result<CowCopy> cow_take(std::uint32_t index);
  Status cow_end();
  // The addresses of the regions the process first touched since its last cut, in order (1.1).
  Result<std::vector<std::uint64_t>> touch_order();
  // Why the process cannot be checkpointed now, one reason each (1.2); empty: nothing stands in
  // the way. A 1.1 process answers unsupported.
  Result<std::vector<std::string>> blockers();
  // The regions this process shares with others, with their keys (1.3).
  Result<std::vector<ShareRecord>> shares();
  // The host memory the program pinned with the driver (1.4; a 1.3 process answers unsupported).
  Result<HostDmaRanges> host_dma();
  // The counting gate (1.3): begin holds every communication launch past those already let
  // through and reports the count; target lets launches through up to `value` (never lowers it);
  // read reports; end lets everything through. A session that ends ends the cut too.
  Result<CutCounts> cut(CutOp op, std::uint64_t value = 0);
  // Says goodbye and waits until the process has closed its end of the connection, then releases
  // the session lock. After it returns the process holds no socket to this caller (CRIU may dump
  // it). Idempotent.
  Status close();
  // As close(), but the session lock stays held: the mailbox comes back, locked, for
  // connect_mailbox() later. No other caller reaches the process meanwhile: gcrd holds it across a
  // CRIU dump, which must find the process connected to no one (a `gcr ps` that got in between
  // the close and the freeze would fail the dump).
  Result<UniqueFd> close_keeping_lock();

 private:
  friend struct ClientExchange;  // client.cpp's helpers
  Client() noexcept;

  pid_t pid_ = 0;
  UniqueFd mailbox_;                  // holds the session lock (flock)
  std::unique_ptr<Channel> channel_;  // null once closed or broken
  ServerInfo server_;
  std::chrono::milliseconds reply_timeout_ = kDefaultReplyTimeout;
};

// Opens the mailbox of `pid` for reading and writing. Fails like Client::connect.
Result<UniqueFd> open_mailbox(pid_t pid);

// Every process (as this process's /proc shows them) with a gcr-control mailbox that this process
// may look at, sorted; for `gcr ps`. Processes it may not inspect are left out silently, and so
// are gcrd and gcr-keeper, which hold other processes' mailboxes.
std::vector<pid_t> find_managed_processes();

// ---- server side ------------------------------------------------------------------------------

// What a server does for its callers; the interposer implements it over interpose/agent_ops.h
// (interpose/agent.cpp), tests with fakes. Called from the serving thread only, one call at a
// time. Implementations return errors that say what the caller should do.
class Handler {
 public:
  virtual ~Handler() = default;
  virtual Status quiesce(std::chrono::milliseconds timeout) = 0;
  virtual Status resume() = 0;
  virtual Result<std::vector<ParkedRegion>> park() = 0;
  virtual Status unpark(std::vector<ParkedRegion> regions) = 0;
  virtual Status new_epoch(const std::string& checkpoint_id) = 0;
  virtual StatusInfo status() = 0;
  virtual std::vector<RegionRecord> regions() = 0;
  // Soft copy-on-write (protocol 1.1); a server without it answers unsupported. cow_end must be
  // idempotent: the session calls it again when it ends.
  // `handover`: gcrd's socket for copies (1.6), or none.
  virtual Status cow_begin(UniqueFd table, UniqueFd handover, std::uint32_t entries);
  virtual Result<CowCopy> cow_take(std::uint32_t index);
  virtual void cow_end() {}
  virtual std::vector<std::uint64_t> touch_order() { return {}; }
  virtual std::vector<std::string> blockers() { return {}; }
  // Protocol 1.3; the defaults are those of a process that shares nothing. cut(end) must be
  // idempotent: the session calls it again when it ends.
  virtual std::vector<ShareRecord> shares() { return {}; }
  // Protocol 1.4: host memory a device may write by DMA.
  virtual HostDmaRanges host_dma() { return {}; }
  virtual CutCounts cut(CutOp op, std::uint64_t value);
};

struct ServerOptions {
  std::string software = "gcr";  // sent in the hello
  // Told what went wrong where no caller could hear it (a rendezvous that failed, a caller
  // refused). Called from the serving thread; may be null.
  void (*log)(std::string_view message) = nullptr;
  // How long the server waits on a caller in the middle of an exchange (a send, the batches of an
  // unpark, the confirmation of a park) before it gives up on the session.
  std::chrono::milliseconds io_timeout{30'000};
};

// The mailbox and the loop that serves it. Address-stable (it holds a mutex): create() returns it
// by unique_ptr. Thread-safety: serve_forever on one thread; the fork hooks on the forking thread.
class Server {
 public:
  // Creates the mailbox (a sealed 4 KiB memfd "gcr-control", close-on-exec).
  static Result<std::unique_ptr<Server>> create(ServerOptions options = {});
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int mailbox_fd() const noexcept { return mailbox_fd_.get(); }

  // The serving thread's body: waits on the mailbox and serves one caller at a time, forever.
  // Never throws; returns only in a forked child after after_fork_child() (never, in practice).
  void serve_forever(Handler& handler) noexcept;

  // Fork hooks (pthread_atfork). prepare/parent keep a connection being opened or closed from
  // straddling a fork; child closes what the child inherited (mailbox, mapping, connection) and
  // is safe even if prepare was not called.
  void prepare_fork() noexcept;
  void after_fork_parent() noexcept;
  void after_fork_child() noexcept;

 private:
  Server() = default;
  void serve_request(Handler& handler, std::uint32_t seq) noexcept;
  void finish_request(std::uint32_t seq, Errc code, std::string_view message) noexcept;
  void log(std::string_view message) noexcept;

  ServerOptions options_;
  UniqueFd mailbox_fd_;
  MailboxLayout* box_ = nullptr;  // the mapped mailbox
  std::mutex fork_mu_;            // held while the connection is opened or closed, and across fork
  int session_fd_ = -1;           // the connection being served; guarded by fork_mu_
  bool fork_locked_ = false;
  bool abandoned_ = false;  // in a forked child
};

}  // namespace gcr::control
