// KernelTracer on libbpf: the skeleton bpftool generated from sched.bpf.c at build time.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstring>
#include <mutex>
#include <thread>

#include "kernel_tracer.h"
#include "sched.skel.h"

namespace gcr::trace {
namespace {

// libbpf prints its diagnostics to stderr; gcr keeps the last one for its own message instead.
std::mutex g_libbpf_mu;
std::string g_libbpf_last;

int keep_libbpf_message(enum libbpf_print_level level, const char* fmt, va_list ap) {
  if (level == LIBBPF_DEBUG) return 0;
  char buf[512];
  int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  std::lock_guard lock(g_libbpf_mu);
  g_libbpf_last.assign(buf);
  while (!g_libbpf_last.empty() && g_libbpf_last.back() == '\n') g_libbpf_last.pop_back();
  return n;
}

std::string last_libbpf_message() {
  std::lock_guard lock(g_libbpf_mu);
  return g_libbpf_last;
}

class BpfTracer final : public KernelTracer {
 public:
  BpfTracer(gcr_sched* skel, pid_t pid, std::vector<std::string> notes)
      : skel_(skel), pid_(pid), notes_(std::move(notes)) {}
  ~BpfTracer() override {
    if (!stopped_) (void)stop();
  }

  Status attach() {
    std::uint32_t key = static_cast<std::uint32_t>(pid_);
    std::uint8_t one = 1;
    if (bpf_map__update_elem(skel_->maps.targets, &key, sizeof key, &one, sizeof one, BPF_ANY))
      return errno_error("adding pid " + std::to_string(pid_) + " to the trace");
    for (bpf_program* prog :
         {skel_->progs.on_switch, skel_->progs.on_wakeup, skel_->progs.on_wakeup_new,
          skel_->progs.on_sys_enter, skel_->progs.on_fork}) {
      bpf_link* link = bpf_program__attach(prog);
      if (!link)
        return Error{Errc::unsupported, std::string("attaching ") + bpf_program__name(prog) + ": " +
                                            std::strerror(errno) + " " + last_libbpf_message()};
      links_.push_back(link);
    }
    // Page faults and disk requests add to the timeline; without them it still stands.
    for (bpf_program* prog : {skel_->progs.on_page_fault_user, skel_->progs.on_block_rq_issue}) {
      if (!bpf_program__autoload(prog)) continue;  // not loaded (start())
      bpf_link* link = bpf_program__attach(prog);
      if (!link) {
        notes_.push_back(std::string(bpf_program__name(prog)) + " not attached (" +
                         std::strerror(errno) + "): the trace lacks what it records");
        continue;
      }
      links_.push_back(link);
    }
    rb_ = ring_buffer__new(bpf_map__fd(skel_->maps.events), &BpfTracer::on_event, this, nullptr);
    if (!rb_) return errno_error("opening the trace's ring buffer");
    // The programs do not wake us per event (sched.bpf.c): drain every 10 ms, well before an
    // 8 MiB buffer fills (about 260k events).
    poller_ = std::thread([this] {
      while (!stopping_.load(std::memory_order_acquire)) {
        ring_buffer__consume(rb_);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
    return ok();
  }

  std::vector<SchedEvent> stop() override {
    if (stopped_) return {};
    stopped_ = true;
    stopping_.store(true, std::memory_order_release);
    if (poller_.joinable()) poller_.join();
    for (bpf_link* l : links_) bpf_link__destroy(l);
    links_.clear();
    if (rb_) {
      ring_buffer__consume(rb_);
      ring_buffer__free(rb_);
      rb_ = nullptr;
    }
    std::uint32_t zero = 0;
    std::uint64_t lost = 0;
    if (bpf_map__lookup_elem(skel_->maps.lost, &zero, sizeof zero, &lost, sizeof lost, 0) == 0 &&
        lost)
      notes_.push_back(std::to_string(lost) +
                       " events were lost (the ring buffer was full): the timeline has gaps");
    if (dropped_)
      notes_.push_back(std::to_string(dropped_) + " events past the first " +
                       std::to_string(kMaxEvents) + " were not kept: the timeline ends early");
    gcr_sched::destroy(skel_);
    skel_ = nullptr;
    std::stable_sort(events_.begin(), events_.end(),
                     [](const SchedEvent& a, const SchedEvent& b) { return a.ts_ns < b.ts_ns; });
    return std::move(events_);
  }

  std::vector<std::string> notes() const override { return notes_; }

 private:
  // A trace left running (a checkpoint that never ends, a busy machine's whole activity) keeps
  // at most kMaxEvents in memory (96 MiB); the rest are counted and said to be missing.
  static constexpr std::size_t kMaxEvents = std::size_t{4} << 20;

  static int on_event(void* self, void* data, size_t size) {
    auto* t = static_cast<BpfTracer*>(self);
    if (size < sizeof(SchedEvent)) return 0;
    if (t->events_.size() >= kMaxEvents) {
      ++t->dropped_;
      return 0;
    }
    t->events_.push_back(*static_cast<SchedEvent*>(data));
    return 0;
  }

  gcr_sched* skel_;
  pid_t pid_;
  std::vector<bpf_link*> links_;
  ring_buffer* rb_ = nullptr;
  std::thread poller_;
  std::atomic<bool> stopping_{false};
  bool stopped_ = false;
  std::vector<SchedEvent> events_;  // written by the poller only until it is joined
  std::uint64_t dropped_ = 0;       // past kMaxEvents; the same
  std::vector<std::string> notes_;
};

// Opens and loads the programs; `optional` false leaves out the page-fault and disk ones.
gcr_sched* open_and_load(bool optional) {
  gcr_sched* skel = gcr_sched::open();
  if (!skel) return nullptr;
  // Pids in the tracer's pid namespace (sched.bpf.c's tracer_pidns): 0 for the initial one.
  constexpr std::uint64_t kInitialPidNamespace = 0xEFFFFFFCu;  // PROC_PID_INIT_INO
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) == 0 && st.st_ino != kInitialPidNamespace)
    skel->rodata->tracer_pidns = static_cast<std::uint32_t>(st.st_ino);
  if (!optional) {
    bpf_program__set_autoload(skel->progs.on_page_fault_user, false);
    bpf_program__set_autoload(skel->progs.on_block_rq_issue, false);
  }
  if (gcr_sched::load(skel) != 0) {
    int err = errno;
    gcr_sched::destroy(skel);
    errno = err;
    return nullptr;
  }
  return skel;
}

}  // namespace

Result<std::unique_ptr<KernelTracer>> KernelTracer::start(pid_t pid) {
  libbpf_set_print(keep_libbpf_message);
  std::vector<std::string> notes;
  gcr_sched* skel = open_and_load(/*optional=*/true);
  if (!skel && errno != EPERM && errno != EACCES) {
    // A kernel without the page_fault_user or block_rq_issue tracepoint (not x86, say).
    std::string why = last_libbpf_message();
    skel = open_and_load(/*optional=*/false);
    if (skel)
      notes.push_back("page faults and disk requests not traced (this kernel: " + why + ")");
  }
  if (!skel) {
    int err = errno;
    std::string why = last_libbpf_message();
    if (err == EPERM || err == EACCES)
      return Error{Errc::permission_denied,
                   "loading eBPF programs needs root (or CAP_BPF and CAP_PERFMON): " +
                       std::string(std::strerror(err))};
    return Error{Errc::unsupported, "cannot load gcr's eBPF programs (" +
                                        std::string(std::strerror(err)) +
                                        (why.empty() ? "" : "; libbpf: " + why) +
                                        "); the kernel needs BTF (/sys/kernel/btf/vmlinux)"};
  }
  auto tracer = std::make_unique<BpfTracer>(skel, pid, std::move(notes));
  GCR_TRY(tracer->attach());
  return std::unique_ptr<KernelTracer>(std::move(tracer));
}

bool kernel_tracing_built() {
  return true;
}

}  // namespace gcr::trace
