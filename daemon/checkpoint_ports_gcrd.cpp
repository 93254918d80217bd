// gcrd's checkpoint ports (checkpoint_ports_gcrd.h).
#include "checkpoint_ports_gcrd.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>

#include "dump_parents.h"
#include "gcr/criu_capabilities.h"
#include "gcr/criu_pagemap.h"
#include "gcr/settings.h"
#include "proc_info.h"

namespace gcr::gcrd {
namespace fs = std::filesystem;

namespace {

// A parked region (or a process's copy) imported into gcrd, read on its device's context.
class ImportedMemory final : public HeldMemory {
 public:
  ImportedMemory(Gpu& gpu, MappedAllocation m) : gpu_(gpu), m_(std::move(m)) {}
  std::uint64_t size() const override { return m_.size(); }
  Status read(std::uint64_t offset, std::span<std::byte> out) const override {
    GCR_TRY(gpu_.use(m_.device()));
    return m_.read(offset, out);
  }

 private:
  Gpu& gpu_;
  MappedAllocation m_;
};

Result<std::unique_ptr<HeldMemory>> import_into(Gpu& gpu, int fd, std::uint64_t size) {
  GCR_TRY_ASSIGN(MappedAllocation m, MappedAllocation::import(fd, size));
  return std::unique_ptr<HeldMemory>(std::make_unique<ImportedMemory>(gpu, std::move(m)));
}

std::vector<std::string> dump_arguments(const criu::ProcessTree& tree, const JobTrees& job,
                                        const CheckpointRequest& req) {
  auto args = tree.dump_arguments();
  if (req.tcp_close) args.push_back("--tcp-close");
  if (!job.tcp.empty())
    for (std::string& a : tcp_criu_arguments()) args.push_back(std::move(a));
  return args;
}

// Lets a tree CRIU left stopped (--leave-stopped) run again, every task of it.
void continue_tree(pid_t root) {
  for (pid_t p : criu::tree_pids(root)) kill(p, SIGCONT);
}

// CRIU's --cow-dma file (gcr/criu.h): "PID START END" per range; with no ranges known, all of
// every member's memory (copied in the freeze, as without --cow-dump).
Status write_dma_file(int fd, const std::vector<pid_t>& members,
                      const std::map<pid_t, std::vector<control::HostDmaRange>>* ranges) {
  std::string text;
  char line[64];
  for (pid_t pid : members) {
    if (!ranges) {
      std::snprintf(line, sizeof line, "%d 0 100000000000000\n", static_cast<int>(pid));
      text += line;
      continue;
    }
    auto it = ranges->find(pid);
    if (it == ranges->end()) continue;
    for (const control::HostDmaRange& r : it->second) {
      std::snprintf(line, sizeof line, "%d %llx %llx\n", static_cast<int>(pid),
                    static_cast<unsigned long long>(r.address),
                    static_cast<unsigned long long>(r.address + r.bytes));
      text += line;
    }
  }
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    return errno_error("writing the file of pinned host memory for CRIU");
  return ok();
}

// Note [A job of several trees] (job.h): tree k's dump, which leaves its tasks stopped.
Result<criu::DumpOptions> tree_dump_options(const criu::DumpOptions& common, const JobTrees& job,
                                            const CheckpointRequest& req, std::size_t k) {
  criu::DumpOptions o = common;
  o.pid = job.trees[k].root;
  o.leave_running = false;
  o.leave_stopped = true;
  o.cow_dump = false;
  o.extra_args = dump_arguments(job.trees[k], job, req);
  for (std::string& a : cross_socket_arguments(job, k)) o.extra_args.push_back(std::move(a));
  if (k > 0) {
    o.image_dir = common.image_dir / tree_images_dir(innermost_pid(o.pid));
    std::error_code ec;
    if (!fs::create_directories(o.image_dir, ec) && ec)
      return Error{Errc::io_error, "creating " + o.image_dir.string() + ": " + ec.message()};
  }
  return o;
}

// Ibid.: one CRIU dump per tree (`started`: each CRIU started before the cut, else started
// here), each leaving its tasks stopped; then, with all of them stopped, nothing may be in flight
// between them. A failure lets every tree dumped so far go on (stopped tasks would not answer gcrd
// giving their memory back); the CRIUs not let go end with nothing frozen.
// `before_going_on`: what the stopped trees need before they run (Note [TCP within a job]).
Status dump_trees(const criu::Tools& tools, const criu::DumpOptions& common, const JobTrees& job,
                  const CheckpointRequest& req, std::vector<criu::StartedDump>& started,
                  const std::function<void()>& before_going_on) {
  auto let_go = [&](std::size_t dumped) {
    before_going_on();
    for (std::size_t k = 0; k < dumped; ++k) continue_tree(job.trees[k].root);
  };
  for (std::size_t k = 0; k < job.trees.size(); ++k) {
    Status s = ok();
    if (k < started.size()) {
      s = started[k].go_and_wait();
    } else if (auto o = tree_dump_options(common, job, req, k)) {
      s = criu::dump(tools, *o);
    } else {
      s = std::move(o).error();
    }
    if (!s) {
      let_go(k);
      started.clear();
      return std::move(s).context("dumping the tree of process " +
                                  std::to_string(job.trees[k].root));
    }
  }
  started.clear();
  if (Status s = check_nothing_in_flight(job); !s) {
    let_go(job.trees.size());
    return s;
  }
  return ok();
}

Status store_criu_images(store::CheckpointWriter& w, const fs::path& dir) {
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::string rel = fs::relative(entry.path(), dir).string();
    if (entry.path().filename() == "criu.out") continue;  // gcr's capture of CRIU's output
    auto perms = static_cast<std::uint32_t>(entry.status().permissions()) & 0777;
    GCR_TRY(w.add_file(rel, perms, entry.path()).context("storing CRIU image file " + rel));
  }
  return ok();
}

// Note [CRIU started before the cut] (gcr/criu.h); GCR_CRIU_EARLY=0 starts it after the park, as
// gcr did before (bench/ckpt_bench.py compares the two).
bool start_criu_early() {
  return settings().criu_early;
}

}  // namespace

// --- MemberSessions ------------------------------------------------------------------------------

MemberSessions::MemberSessions(std::vector<Member>& members, std::vector<SharedAllocation> shared,
                               CarriedTcp tcp, JobLink* link, Gpu& gpu)
    : members_(members),
      shared_(std::move(shared)),
      tcp_(std::move(tcp)),
      link_(link),
      gpu_(gpu),
      open_(members.size(), true),
      locks_(members.size()),
      handover_(members.size()),
      handed_(members.size()) {}

Status MemberSessions::cow_begin(std::size_t m, int fd, std::uint32_t entries) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    return errno_error("making the socket for the copies of process " + std::to_string(pid(m)));
  UniqueFd ours(sv[0]), theirs(sv[1]);
  GCR_TRY(members_[m].client.cow_begin(fd, entries, theirs.get()));
  handover_[m] = std::move(ours);
  return ok();
}

bool MemberSessions::same_process(std::size_t m) const {
  const std::uint64_t started = members_[m].started;
  return started == 0 || criu::process_start_time(pid(m)) == started;
}

bool MemberSessions::gone(std::size_t m) const {
  return trace_state(pid(m)) == TraceState::gone || !same_process(m);
}

Result<bool> MemberSessions::ensure_running(std::size_t m) {
  if (!same_process(m)) return false;  // ended: no driver state of its to finish
  return ensure_cuda_running(pid(m));
}

namespace {
// Every copy waiting on the socket, by entry (Note [Copies handed over]).
void receive_copies(int socket, std::map<std::uint32_t, UniqueFd>& into) {
  for (;;) {
    cow::HandoverMessage m{};
    iovec iov{&m, sizeof m};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = ::recvmsg(socket, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nothing more (or the process's end closed with nothing in flight)
    UniqueFd fd;
    for (cmsghdr* h = CMSG_FIRSTHDR(&msg); h; h = CMSG_NXTHDR(&msg, h))
      if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS &&
          h->cmsg_len == CMSG_LEN(sizeof(int))) {
        int received;
        std::memcpy(&received, CMSG_DATA(h), sizeof received);
        fd.reset(received);
      }
    // The process is untrusted (docs/security.md): a message without its fd, or truncated, is
    // dropped; the entry's copy is then asked for with cow_take, or the checkpoint fails.
    if (n != sizeof m || !fd || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) continue;
    into[m.index] = std::move(fd);
  }
}
}  // namespace

Status MemberSessions::cut(std::chrono::milliseconds timeout, const Progress& progress) {
  return reach_cut(members_, shared_, tcp_, link_, timeout, progress);
}

void MemberSessions::end_cut() {
  gcr::gcrd::end_cut(members_);
}

Status MemberSessions::quiesce(std::chrono::milliseconds timeout) {
  return quiesce_members(members_, timeout);
}

Status MemberSessions::close(std::size_t m) {
  open_[m] = false;  // a session that fails to close is as good as closed
  GCR_TRY_ASSIGN(locks_[m], members_[m].client.close_keeping_lock());
  return ok();
}

// A new session; with the lock this gcrd kept since close(), no one else got in meanwhile.
Result<control::Client> MemberSessions::connect_again(std::size_t m) {
  if (!same_process(m))
    return Error{Errc::not_found, "process " + std::to_string(pid(m)) +
                                      " ended during the checkpoint (its pid names another "
                                      "process now)"};
  if (locks_[m])
    return control::Client::connect_mailbox(pid(m), std::move(locks_[m]), std::chrono::seconds(10));
  return control::Client::connect(pid(m), std::chrono::seconds(10));
}

Status MemberSessions::reopen(std::size_t m) {
  GCR_TRY_ASSIGN(members_[m].client, connect_again(m));
  open_[m] = true;
  return ok();
}

// After a failed dump or store: undoes a driver lock CRIU may have left (it died, or crashed),
// then maps the parked regions back and lets the process run.
bool MemberSessions::give_back(std::size_t m, const std::vector<control::ParkedRegion>& regions) {
  (void)ensure_running(m);
  auto again = connect_again(m);  // none when it ended: its memory has no one to go back to
  if (!again) return false;
  Status unparked = again->unpark(regions);
  (void)again->resume();
  (void)again->close();
  return static_cast<bool>(unparked);
}

Result<std::unique_ptr<HeldMemory>> MemberSessions::cow_take(std::size_t m, std::uint32_t index,
                                                             std::uint64_t size) {
  if (handover_[m]) receive_copies(handover_[m].get(), handed_[m]);
  if (auto it = handed_[m].find(index); it != handed_[m].end()) {
    UniqueFd fd = std::move(it->second);
    handed_[m].erase(it);
    return import_into(gpu_, fd.get(), size);
  }
  GCR_TRY_ASSIGN(control::CowCopy copy, members_[m].client.cow_take(index));
  if (copy.size != size)
    return Error{Errc::protocol, "the process's copy has " + std::to_string(copy.size) +
                                     " bytes, not " + std::to_string(size)};
  return import_into(gpu_, copy.fd.get(), copy.size);
}

// --- ProcessKeepers, GpuHolder -------------------------------------------------------------------

Status ProcessKeepers::start(pid_t pid, const std::vector<control::ParkedRegion>& parked,
                             const std::vector<pid_t>& stopped_roots) {
  GCR_TRY_ASSIGN(Keeper k, Keeper::start(pid, parked, stopped_roots));
  keepers_.push_back(std::move(k));
  return ok();
}

void ProcessKeepers::done() {
  for (Keeper& k : keepers_) k.done();
}

void ProcessKeepers::handed_over() {
  for (Keeper& k : keepers_) k.handed_over();
}

void ProcessKeepers::kept() {
  for (Keeper& k : keepers_) k.kept();
}

void ProcessKeepers::say(const std::string& lines) {
  for (Keeper& k : keepers_) k.say(lines);
}

Result<std::unique_ptr<HeldMemory>> GpuHolder::import(int fd, std::uint64_t size) {
  return import_into(gpu_, fd, size);
}

// --- CriuDumper ----------------------------------------------------------------------------------

CriuDumper::CriuDumper(const criu::Tools& tools, const CheckpointRequest& request,
                       const JobTrees& trees, ProcessKey key, std::vector<pid_t> members)
    : tools_(tools),
      req_(request),
      trees_(trees),
      key_(key),
      members_(std::move(members)),
      // Note [A job across hosts]: a part that stops its job waits stopped until every host has
      // dumped, as a job of several trees does; a live part of one tree is let go by CRIU as any
      // live checkpoint (--cow-dump), still parked: its ranks send nothing until every host has
      // dumped and the lock is gone (they wait at the closed gate for their memory).
      several_(trees.trees.size() > 1 || (request.link && !request.leave_running)) {}

CriuDumper::~CriuDumper() = default;

std::string CriuDumper::images_in() const {
  return in_memory_ ? "memory" : "disk";
}

Result<bool> CriuDumper::prepare(const PinnedHostMemory& pinned, const Progress& progress) {
  // Note [CRIU's capabilities probed] (gcr/criu_capabilities.h)
  for (const criu::ProcessTree& tree : trees_.trees) GCR_TRY(criu::dumpable_by(tree, *tools_.can));
  say_fallbacks(progress);
  // Note [Dumping into memory]: CRIU writes host memory there while the process is frozen.
  GCR_TRY_ASSIGN(WorkDir w, WorkDir::create_for_dump(resident_bytes(trees_.all.pids), &in_memory_));
  work_.emplace(std::move(w));
  // Without --leave-running the process is not ended by CRIU but left stopped, and ended only
  // once its checkpoint is committed: should anything fail before that (gcrd included: see
  // gcr-keeper), the process goes on instead of being lost with its checkpoint.
  options_ = criu::DumpOptions{req_.pid,           work_->path(),
                               req_.leave_running, !req_.leave_running,
                               driver_env(),       dump_arguments(trees_.all, trees_, req_)};
  options_.cow_dump = true;  // Note [Pages written after the resume] (gcr/criu.h)
  // Pinned pages a device may write after the resume reach the images unseen without --cow-dma,
  // unless the interposer writes each first (Note [Device writes to pinned host memory]), which
  // GCR_PINNED_FROZEN=1 declines: all is then written in the freeze.
  if (req_.leave_running && tools_.cow_dump && !tools_.cow_dma && settings().pinned_frozen) {
    options_.cow_dump = false;
    progress("warning: " + criu::Capabilities::lacking(criu::Capability::cow_dma,
                                                       "host memory written inside the freeze "
                                                       "(GCR_PINNED_FROZEN=1)"));
  }
  // Ibid.: pinned host memory, written after park, read by CRIU in the freeze.
  if (req_.leave_running && tools_.cow_dma && !several_) {
    dma_file_.reset(::memfd_create("gcr-cow-dma", MFD_CLOEXEC));
    if (!dma_file_) return errno_error("creating the file of pinned host memory for CRIU");
    options_.cow_dma_fd = dma_file_.get();
  }
  // Note [Host memory tracked between checkpoints] (host_tracking.h): a failure to set it up
  // only makes this dump a full one.
  if (req_.leave_running && tools_.cow_track && !several_) {
    if (pinned.untrackable) {
      HostTracking::instance().forget(key_);  // its userfaultfds close: the protection ends
      progress("host memory is not tracked between checkpoints: process " +
               std::to_string(pinned.untrackable) +
               " pinned host memory with the driver (which devices write past write "
               "protection) and cannot say where");
    } else if (auto t = HostTracking::instance().begin(key_)) {
      tracking_.emplace(std::move(t).value());
      options_.cow_track_socket = tracking_->criu_socket();
      if (tracking_->parent_images()) options_.prev_images = *tracking_->parent_images();
    }
  }
  // Note [Incremental dumps made whole] (gcr/criu_pagemap.h): CRIU's own tracking, where it lacks
  // cow-track and the kernel has soft-dirty bits.
  if (req_.leave_running && tools_.track_mem && !several_) {
    options_.track_mem = true;
    dump_parent_ = DumpParents::instance().take(key_);
    if (dump_parent_) {
      options_.prev_images = dump_parent_->path();
      progress(
          "host memory: only what was written since the previous checkpoint is taken from "
          "the process (CRIU's --track-mem, the kernel's soft-dirty bits)");
    }
  }
  if (!start_criu_early()) return false;
  const auto wait_limit = std::chrono::duration_cast<std::chrono::seconds>(req_.quiesce_timeout) +
                          std::chrono::seconds(30);  // CRIU's --timeout: the cut and park too
  if (several_) {
    for (std::size_t k = 0; k < trees_.trees.size(); ++k) {
      GCR_TRY_ASSIGN(criu::DumpOptions o, tree_dump_options(options_, trees_, req_, k));
      GCR_TRY_ASSIGN(criu::StartedDump started, criu::StartedDump::start(tools_, o, wait_limit));
      early_trees_.push_back(std::move(started));
    }
    progress("starting CRIU for each of the job's " + std::to_string(trees_.trees.size()) +
             " trees");
    for (criu::StartedDump& d : early_trees_) GCR_TRY(d.wait_ready(std::chrono::seconds(30)));
    return true;
  }
  GCR_TRY_ASSIGN(criu::StartedDump started, criu::StartedDump::start(tools_, options_, wait_limit));
  early_.emplace(std::move(started));
  progress("starting CRIU");
  GCR_TRY(early_->wait_ready(std::chrono::seconds(30)));
  return true;
}

// One line per thing this checkpoint does the slow way because this CRIU cannot do it the fast.
void CriuDumper::say_fallbacks(const Progress& progress) const {
  if (!req_.leave_running) return;
  if (settings().criu_cow_dump && !tools_.can->has(criu::Capability::cow_dump)) {
    progress("warning: " + criu::Capabilities::lacking(criu::Capability::cow_dump,
                                                       "host memory written inside the freeze"));
  } else if (tools_.cow_dump && !several_ && settings().criu_cow_track && !tools_.track_mem &&
             !tools_.can->has(criu::Capability::cow_track)) {
    progress("warning: " + criu::Capabilities::lacking(criu::Capability::cow_track,
                                                       "all host memory copied again (none is "
                                                       "tracked between checkpoints)"));
  }
}

void CriuDumper::cancel() {
  early_.reset();  // no go: the plugin fails the dump before anything is frozen
  early_trees_.clear();
}

// CRIU sees the socket end: a full dump (a CRIU not started yet gets none).
void CriuDumper::stop_tracking(bool forget) {
  tracking_.reset();
  if (forget) HostTracking::instance().forget(key_);
  options_.cow_track_socket = -1;
  options_.prev_images.clear();
}

Status CriuDumper::pinned_known(const PinnedHostMemory* pinned) {
  if (tracking_ && !pinned) stop_tracking(true);
  if (dma_file_)
    return write_dma_file(dma_file_.get(), members_, pinned ? &pinned->ranges : nullptr);
  return ok();
}

Result<DumpOutcome> CriuDumper::dump(const PinnedHostMemory& pinned, std::uint64_t* lifted) {
  if (tracking_ && !tracking_->hand_in(pinned.ranges, lifted)) stop_tracking(false);
  // Note [Pages written after the resume] (gcr/criu.h): a CRIU that writes the pages after the
  // process runs again has let it go before it ends; it is waited for before its images are
  // stored.
  // Note [A job across hosts] (job_link.h): no host freezes a rank before every host's ranks
  // are drained.
  Status locked = req_.link ? req_.link->quiesced() : ok();
  if (locked) locked = lock_tcp();
  if (!locked) {
    tracking_.reset();
    return std::move(locked).error();
  }
  Status dumped = ok();
  if (early_ && req_.leave_running && tools_.cow_dump)
    criu_running_ = early_->go_until_released(&dumped);
  else if (several_)
    dumped = dump_trees(tools_, options_, trees_, req_, early_trees_, [this] { end_tcp_repair(); });
  else
    dumped = early_ ? early_->go_and_wait() : criu::dump(tools_, options_);
  // Every end is dumped (on every host: ibid.) before any is unlocked.
  if (dumped && req_.link)
    if (Status met = req_.link->dumped(); !met) {
      continue_trees();  // every tree here was dumped and waits stopped: on with them
      tracking_.reset();
      return std::move(met).error();
    }
  // Its chain is removed once the processes run (after_resume), out of the stall. Trees left
  // stopped keep it closed until they go on (continue_trees) or end (end_trees): a peer that is
  // not stopped (Note [A rank moved while its job runs]) must not reach a socket that stays here.
  if (req_.leave_running && !several_) tcp_lock_.open();
  if (!dumped) {
    end_tcp_repair();  // a tree CRIU left stopped before failing goes on
    // CRIU has ended: whatever it was handed is served again, or its protection ends, before
    // anything waits on the process (which may wait on a protected page). CRIU's plugin unlocks
    // the process when a dump fails, unless CRIU itself died: the give-back undoes that first.
    tracking_.reset();
    return std::move(dumped).error();
  }
  return DumpOutcome{!req_.leave_running || several_};
}

// Note [TCP within a job] (job_tcp.h): the carried sockets are taken first (their processes still
// run), let settle (Note [A lock that drops nothing]), then the connections locked.
Status CriuDumper::lock_tcp() {
  if (trees_.tcp.empty()) return ok();
  GCR_TRY_ASSIGN(RepairedSockets r, RepairedSockets::take(trees_.tcp.ends));
  r.settle(std::chrono::milliseconds(10));
  if (!req_.leave_running || several_) repaired_.emplace(std::move(r));  // left in repair mode
  GCR_TRY_ASSIGN(tcp_lock_, TcpLock::engage(req_.pid, trees_.tcp.connections));
  std::string lines =
      "tcp_lock " + std::to_string(tcp_lock_.netns_pid()) + " " + tcp_lock_.chain() + "\n";
  if (repaired_)
    for (const TcpEnd& e : trees_.tcp.ends)
      lines += "tcp_end " + std::to_string(e.pid) + " " + std::to_string(e.fd) + "\n";
  say_(lines);
  return ok();
}

// The lock first, so that the window probe of each socket leaving repair mode gets through. Its
// chain is removed later (remove_tcp_lock), out of the stall.
void CriuDumper::end_tcp_repair() {
  tcp_lock_.open();
  if (repaired_) {
    repaired_->end_repair();
    say_("tcp_repaired\n");
  }
  repaired_.reset();
  if (!tcp_lock_.engaged() && !trees_.tcp.empty()) say_("tcp_unlocked\n");  // open() fell back
}

// Once the keepers hear it, a gcrd that dies leaves them no lock to remove.
void CriuDumper::remove_tcp_lock() {
  if (!tcp_lock_.engaged()) return;
  tcp_lock_.release();
  say_("tcp_unlocked\n");
}

void CriuDumper::continue_trees() {
  end_tcp_repair();
  continue_tree(req_.pid);
  for (pid_t root : req_.job_pids) continue_tree(root);
}

Result<bool> CriuDumper::finish() {
  if (!criu_running_) return false;
  criu_running_ = false;
  if (Status s = early_->go_and_wait(); !s) {
    tracking_.reset();
    return std::move(s).error();
  }
  return true;
}

Result<Dumper::Stored> CriuDumper::store(store::CheckpointWriter& writer) {
  std::error_code ignored;
  fs::remove(work_->path() / "parent", ignored);  // --prev-images-dir's link: the dump stands alone
  criu::WholeDump whole;
  if (dump_parent_) {  // Note [Incremental dumps made whole] (gcr/criu_pagemap.h)
    GCR_TRY_ASSIGN(whole, criu::make_dump_whole(work_->path(), dump_parent_->path())
                              .context("making CRIU's incremental dump whole"));
  }
  GCR_TRY(store_criu_images(writer, work_->path()));
  Stored out;
  HostPages pages;  // what CRIU's log says of --cow-dump, --cow-dma and --cow-track
  if (dma_file_ || tracking_) pages = read_host_pages(work_->path() / "dump.log");
  out.dma = pages.dma;
  out.saved = pages.saved;
  if (tracking_) {
    // CRIU's images are the next dump's parent, whatever becomes of this checkpoint.
    out.from_parent = pages.from_parent;
    out.from_process = pages.from_process;
    out.tracked_tasks = tracking_->commit(std::move(*work_));
    work_.reset();
  } else if (options_.track_mem) {
    out.from_parent = whole.from_parent;
    out.from_process = whole.from_dump;
    dump_parent_.reset();
    DumpParents::instance().keep(key_, std::move(*work_));  // the next dump's parent
    work_.reset();
  }
  return out;
}

void CriuDumper::end_trees() {
  criu::kill_tree(req_.pid);
  for (pid_t root : req_.job_pids) criu::kill_tree(root);
  remove_tcp_lock();
}

Result<bool> CriuDumper::dump_after_commit(const std::string&) {
  return Error{Errc::internal, "gcr's own CRIU dumps before the commit"};
}

// --- RuntimeDumper -------------------------------------------------------------------------------

Result<DumpOutcome> RuntimeDumper::dump(const PinnedHostMemory&, std::uint64_t*) {
  return Error{Errc::internal, "a container runtime's CRIU dumps after the commit"};
}

Result<bool> RuntimeDumper::dump_after_commit(const std::string& checkpoint_id) {
  Result<bool> dumped = req_.external_criu(checkpoint_id);
  if (!dumped) return std::move(dumped).context("the runtime's CRIU").error();
  if (!*dumped)
    return Error{Errc::io_error, "the runtime's CRIU failed to dump process " +
                                     std::to_string(req_.pid) +
                                     " (see its log); the process runs on"};
  // CRIU ends or lets go of the tasks right after the plugin's exit hook.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  TraceState state = trace_state(req_.pid);
  while (state == TraceState::traced && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    state = trace_state(req_.pid);
  }
  return state != TraceState::gone;
}

}  // namespace gcr::gcrd
