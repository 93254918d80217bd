// The interposer's agent thread: libgcr's control::Server (docs/protocol.md) on a detached
// thread named "gcr-control", serving requests by calling the region manager's operations
// (agent_ops.h). It owns the thread and fork handling; the protocol itself is libgcr's.
//
// The thread lives inside an arbitrary program, so: it blocks every signal (the program's handlers
// never run on it), lets no exception escape (the Server catches), reports only failures nobody
// asked about, through write(2) rather than stdio, and only the first few of them.
#include "agent.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>

#include "agent_ops.h"
#include "cut.h"
#include "gcr/control.h"
#include "locks.h"

namespace gcr::interpose {
namespace {

namespace ctl = gcr::control;

constexpr char kThreadName[] = "gcr-control";
constexpr int kMaxLogLines = 8;

// The region manager's operations behind libgcr's Handler interface. Each op_* is called from the
// agent thread only, one at a time, as agent_ops.h requires.
class OpsHandler final : public ctl::Handler {
 public:
  Status quiesce(std::chrono::milliseconds timeout) override {
    auto ms = std::min<long long>(timeout.count(), std::numeric_limits<unsigned>::max());
    return op_quiesce(static_cast<unsigned>(ms < 0 ? 0 : ms));
  }
  Status resume() override { return op_resume(); }
  Result<std::vector<ctl::ParkedRegion>> park() override { return op_park(); }
  Status unpark(std::vector<ctl::ParkedRegion> regions) override {
    return op_unpark(std::move(regions));
  }
  Status new_epoch(const std::string& checkpoint_id) override {
    return op_new_epoch(checkpoint_id);
  }
  Status cow_begin(UniqueFd table, UniqueFd handover, std::uint32_t entries) override {
    return op_cow_begin(std::move(table), std::move(handover), entries);
  }
  Result<ctl::CowCopy> cow_take(std::uint32_t index) override { return op_cow_take(index); }
  void cow_end() override { op_cow_end(); }
  std::vector<std::uint64_t> touch_order() override { return op_touch_order(); }
  ctl::StatusInfo status() override { return op_status(); }
  std::vector<ctl::RegionRecord> regions() override { return op_regions(); }
  std::vector<std::string> blockers() override { return op_blockers(); }
  std::vector<ctl::ShareRecord> shares() override { return op_shares(); }
  ctl::HostDmaRanges host_dma() override { return op_host_dma(); }
  ctl::CutCounts cut(ctl::CutOp op, std::uint64_t value) override { return op_cut(op, value); }
};

std::atomic<int> g_log_lines{0};

// Failures no caller heard about (a refused caller, a rendezvous that failed, a lost park).
void log_line(std::string_view message) {
  int n = g_log_lines.fetch_add(1, std::memory_order_relaxed);
  if (n >= kMaxLogLines) return;
  std::string line = "gcr: control: ";
  line.append(message);
  if (n == kMaxLogLines - 1) line += " (further control messages suppressed)";
  line += '\n';
  for (std::size_t off = 0; off < line.size();) {
    ssize_t w = ::write(STDERR_FILENO, line.data() + off, line.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    off += static_cast<std::size_t>(w);
  }
}

// Both live for the life of the process: the detached thread uses them until exit, so they are
// never destroyed (a static's destructor at exit would race with it).
ctl::Handler& handler() {
  static ctl::Handler* h = new OpsHandler();
  return *h;
}

// Starting the agent thread, and the fork hooks that keep it from starting across a fork.
struct AgentStart {
  RankedMutex mu{LockRank::agent_start};
  bool fork_locked GCR_GUARDED_BY(mu) = false;  // agent_prepare_fork took mu
};
AgentStart g_agent_start;
std::atomic<ctl::Server*> g_server{nullptr};
std::atomic<bool> g_forked_child{false};

void* agent_thread_main(void* arg) {
  static_cast<ctl::Server*>(arg)->serve_forever(handler());
  return nullptr;
}

}  // namespace

Status start_agent_thread() {
  if (g_forked_child.load(std::memory_order_acquire))
    return make_error(Errc::unsupported,
                      "this process was forked from a gcr-managed process without exec; gcr does "
                      "not manage it");
  MutexLock lock(g_agent_start.mu);
  if (g_server.load(std::memory_order_acquire)) return ok();

  ctl::ServerOptions options;
  options.software = "gcr interposer";
  options.log = log_line;
  Result<std::unique_ptr<ctl::Server>> server = ctl::Server::create(std::move(options));
  if (!server) return std::move(server).context("creating the gcr-control mailbox").error();
  (void)handler();

  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);  // the new thread inherits: no signal ever runs on it
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  int rc = pthread_create(&thread, &attr, agent_thread_main, server->get());
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (rc != 0) return errno_error("starting the gcr-agent thread", rc);
  pthread_setname_np(thread, kThreadName);
  g_server.store(server->release(), std::memory_order_release);  // the thread owns it from now on
  return ok();
}

void agent_prepare_fork() noexcept GCR_NO_THREAD_SAFETY_ANALYSIS {
  g_agent_start.mu.lock();
  g_agent_start.fork_locked = true;
  if (ctl::Server* s = g_server.load(std::memory_order_acquire)) s->prepare_fork();
}

void agent_after_fork_parent() noexcept GCR_NO_THREAD_SAFETY_ANALYSIS {
  if (!g_agent_start.fork_locked) return;
  if (ctl::Server* s = g_server.load(std::memory_order_acquire)) s->after_fork_parent();
  g_agent_start.fork_locked = false;
  g_agent_start.mu.unlock();
}

void agent_after_fork_child() noexcept GCR_NO_THREAD_SAFETY_ANALYSIS {
  g_forked_child.store(true, std::memory_order_release);
  // The Server object is left allocated: the parent's thread, which owned it, is not here.
  if (ctl::Server* s = g_server.exchange(nullptr)) s->after_fork_child();
  if (g_agent_start.fork_locked) {
    g_agent_start.fork_locked = false;
    g_agent_start.mu.unlock();
  }
}

}  // namespace gcr::interpose
