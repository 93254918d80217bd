#include "host_tracking.h"

#include <linux/userfaultfd.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <fcntl.h>

#include "gcr/criu.h"
#include "gcr/result.h"
#include "gcr/settings.h"

namespace gcr::gcrd {

namespace {

using Key = std::pair<pid_t, std::uint64_t>;
Key key_of(const ProcessKey& k) {
  return {k.pid, k.start_time};
}

enum class Kind { uffd, socket, exit };

struct Watched {
  Kind kind;
  Key key;                    // the process it belongs to
  std::uint64_t session = 0;  // Kind::socket, and a uffd not committed yet
  pid_t pid = 0;              // Kind::uffd: the task
  UniqueFd fd;
};

// One message of the --cow-track socket: a pid with its userfaultfd, or pid 0 (the end).
Status send_tracked(int sock, std::int32_t pid, int fd) {
  char control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{&pid, sizeof pid};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  if (fd >= 0) {
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    cmsghdr* h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(h), &fd, sizeof(int));
  }
  ssize_t n;
  do n = ::sendmsg(sock, &m, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof pid))
    return errno_error("handing the tracked host memory of pid " + std::to_string(pid) +
                       " to CRIU");
  return ok();
}

// GCR_HOST_TRACK_BLOCK (Settings::host_track_block_bytes): how much memory one fault unprotects
// (a power of two, at least a page; default 2 MiB).
std::uint64_t tracking_block(std::uint64_t page) {
  std::uint64_t block = settings().host_track_block_bytes;
  if (block < page) block = 2u << 20;
  return std::max(block, page);
}

}  // namespace

HostPages read_host_pages(const std::filesystem::path& dump_log) {
  HostPages pages;
  std::ifstream in(dump_log);
  std::string line;
  while (std::getline(in, line)) {
    unsigned long long dma = 0;
    int dma_pid = 0;
    if (auto d = line.find("cow-dma: pid ");
        d != std::string::npos &&
        std::sscanf(line.c_str() + d, "cow-dma: pid %d: %llu pages", &dma_pid, &dma) == 2)
      pages.dma += dma;
    unsigned long long saved = 0;
    int saved_pid = 0;
    if (auto c = line.find("cow-dump: ");
        c != std::string::npos &&
        std::sscanf(line.c_str() + c,
                    "cow-dump: %llu pages of %d were written during the write-out", &saved,
                    &saved_pid) == 2)
      pages.saved += saved;
    auto at = line.find("cow-track: pid ");
    if (at == std::string::npos) continue;
    unsigned long long parent = 0, process = 0;
    int pid = 0;
    if (std::sscanf(line.c_str() + at,
                    "cow-track: pid %d: %llu pages from the parent's images, %llu from the task",
                    &pid, &parent, &process) == 3) {
      pages.from_parent += parent;
      pages.from_process += process;
    }
  }
  return pages;
}

struct HostTracking::State {
  std::mutex mu;
  std::condition_variable ended_cv;
  UniqueFd epoll;
  std::map<std::uint64_t, Watched> watched;  // by id, the epoll data
  struct Process {
    std::optional<WorkDir>
        images;  // the last dump's, which the next one takes unchanged pages from
    std::uint64_t exit_watch = 0;
  };
  std::map<Key, Process> tracked;
  struct Session {
    Key key;
    UniqueFd unsent;           // gcrd's end of the socket until hand_in watches it
    std::uint64_t socket = 0;  // its watch from hand_in until CRIU's list ends
    bool ended = false;        // CRIU's list has come back, or CRIU has gone
    bool taken = false;        // CRIU took the list handed in (gcrd stopped serving it)
  };
  std::map<std::uint64_t, Session> sessions;
  std::uint64_t next_id = 1;
  std::thread thread;

  std::uint64_t watch(Watched w) {
    std::uint64_t id = next_id++;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = id;
    int fd = w.fd.get();
    watched.emplace(id, std::move(w));
    if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      watched.erase(id);  // closes it: for a userfaultfd, the protection ends
      return 0;
    }
    return id;
  }
  // Returns the fd, no longer watched.
  UniqueFd unwatch(std::uint64_t id) {
    auto it = watched.find(id);
    if (it == watched.end()) return UniqueFd();
    ::epoll_ctl(epoll.get(), EPOLL_CTL_DEL, it->second.fd.get(), nullptr);
    UniqueFd fd = std::move(it->second.fd);
    watched.erase(it);
    return fd;
  }
  std::vector<std::uint64_t> uffds_of(const Key& key, std::uint64_t session) const {
    std::vector<std::uint64_t> ids;
    for (const auto& [id, w] : watched)
      if (w.kind == Kind::uffd && w.key == key && w.session == session) ids.push_back(id);
    return ids;
  }
  // Ends the tracking of a process: its userfaultfds close (the protection ends). Its images are
  // handed back, to be removed outside the lock.
  std::optional<WorkDir> drop(const Key& key) {
    for (std::uint64_t id : uffds_of(key, 0)) unwatch(id);
    auto it = tracked.find(key);
    if (it == tracked.end()) return std::nullopt;
    unwatch(it->second.exit_watch);
    std::optional<WorkDir> images = std::move(it->second.images);
    tracked.erase(it);
    return images;
  }

  // A first write to a protected page: lift the protection of the block around it (Note [Host
  // memory tracked between checkpoints]: a fault per block, not per page), which wakes the
  // writer. A block that runs past the registered memory is refused (ENOENT): halved until it
  // fits, down to the page.
  void serve(int uffd) {
    static const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    static const std::uint64_t block = tracking_block(page);
    uffd_msg msg;
    while (::read(uffd, &msg, sizeof msg) == static_cast<ssize_t>(sizeof msg)) {
      if (msg.event != UFFD_EVENT_PAGEFAULT) continue;
      bool lifted = false;
      for (std::uint64_t len = block; len >= page && !lifted; len /= 2) {
        uffdio_writeprotect wp{};
        wp.range.start = msg.arg.pagefault.address & ~(len - 1);
        wp.range.len = len;
        wp.mode = 0;
        lifted = ::ioctl(uffd, UFFDIO_WRITEPROTECT, &wp) == 0;
      }
      if (!lifted) {  // unmapped since: wake the writer, which retries
        uffdio_range wake{msg.arg.pagefault.address & ~(page - 1), page};
        (void)::ioctl(uffd, UFFDIO_WAKE, &wake);
      }
    }
  }

  void receive(std::uint64_t id, Watched& socket) {
    const Key key = socket.key;
    const std::uint64_t session = socket.session;
    std::int32_t pid;
    UniqueFd fd;
    while (criu::receive_cow_track(socket.fd.get(), &pid, &fd)) {
      if (pid == -1) {
        // CRIU takes them over: gcrd stops serving them and closes its copies (from here CRIU's
        // death ends the protection at once), then says so, and CRIU goes on.
        for (std::uint64_t u : uffds_of(key, 0)) unwatch(u);
        if (auto s = sessions.find(session); s != sessions.end()) s->second.taken = true;
        (void)send_tracked(socket.fd.get(), -2, -1);
        continue;
      }
      if (pid == 0) {
        unwatch(id);
        if (auto s = sessions.find(session); s != sessions.end()) {
          s->second.socket = 0;
          s->second.ended = true;
        }
        ended_cv.notify_all();
        return;
      }
      Watched w{Kind::uffd, key, session, pid, std::move(fd)};
      int raw = w.fd.get();
      if (watch(std::move(w)) != 0) serve(raw);  // a write may wait already
    }
  }

  void run() {
    epoll_event events[64];
    for (;;) {
      int n = ::epoll_wait(epoll.get(), events, 64, -1);
      if (n < 0 && errno != EINTR) return;
      std::vector<std::optional<WorkDir>> gone;
      {
        std::lock_guard lock(mu);
        for (int i = 0; i < n; ++i) {
          auto it = watched.find(events[i].data.u64);
          if (it == watched.end()) continue;  // unwatched since epoll_wait returned
          switch (it->second.kind) {
            case Kind::uffd:
              serve(it->second.fd.get());
              break;
            case Kind::socket:
              receive(it->first, it->second);
              break;
            case Kind::exit:
              gone.push_back(drop(it->second.key));
              break;
          }
        }
      }
      // Their images (as large as their host memory) are removed off this thread, which serves
      // every tracked process's faults.
      if (std::any_of(gone.begin(), gone.end(), [](const auto& g) { return g.has_value(); }))
        std::thread([g = std::move(gone)] {}).detach();
    }
  }
};

HostTracking::HostTracking() : state_(std::make_unique<State>()) {
  state_->epoll.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (state_->epoll) state_->thread = std::thread([s = state_.get()] { s->run(); });
}

HostTracking& HostTracking::instance() {
  static HostTracking* tracking = new HostTracking();  // its thread runs until gcrd exits
  return *tracking;
}

void HostTracking::forget(const ProcessKey& key) {
  std::optional<WorkDir> gone;
  std::lock_guard lock(state_->mu);
  gone = state_->drop(key_of(key));
}

Result<TrackedDump> HostTracking::begin(const ProcessKey& key) {
  State& s = *state_;
  if (!s.epoll) return errno_error("starting gcrd's host-memory tracking");
  int p[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, p) != 0)
    return errno_error("creating the socket CRIU hands tracked host memory on");
  UniqueFd ours(p[0]), criu_end(p[1]);
  // CRIU's end blocks: it reads the handed-in list once, in the freeze. Ours holds the list until
  // then: room for a tree of many tasks (a message with a file takes ~1 KiB of it).
  ::fcntl(criu_end.get(), F_SETFL, 0);
  int room = 8 << 20;
  if (::setsockopt(ours.get(), SOL_SOCKET, SO_SNDBUFFORCE, &room, sizeof room) != 0)
    (void)::setsockopt(ours.get(), SOL_SOCKET, SO_SNDBUF, &room, sizeof room);
  std::lock_guard lock(s.mu);
  std::uint64_t session = s.next_id++;
  State::Session& entry = s.sessions[session];
  entry.key = key_of(key);
  entry.unsent = std::move(ours);
  TrackedDump dump(this, key, session);
  dump.criu_end_ = std::move(criu_end);
  if (auto it = s.tracked.find(key_of(key)); it != s.tracked.end() && it->second.images)
    dump.parent_ = it->second.images->path();
  return dump;
}

TrackedDump::TrackedDump(HostTracking* owner, ProcessKey key, std::uint64_t session)
    : owner_(owner), key_(key), session_(session) {}

TrackedDump::TrackedDump(TrackedDump&& o) noexcept
    : owner_(std::exchange(o.owner_, nullptr)),
      key_(o.key_),
      session_(o.session_),
      criu_end_(std::move(o.criu_end_)),
      parent_(std::move(o.parent_)),
      handed_in_(o.handed_in_),
      committed_(o.committed_) {}

namespace {

// The task's mappings, [start, end) each, from /proc/PID/maps.
std::vector<std::pair<std::uint64_t, std::uint64_t>> mappings_of(pid_t pid) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
  std::ifstream in("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  while (std::getline(in, line)) {
    unsigned long long start = 0, end = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx", &start, &end) == 2) out.emplace_back(start, end);
  }
  return out;
}

// Lifts the write protection of [start, start + len) where uffd tracks it: one call per mapping
// it crosses; a mapping the userfaultfd does not track (ENOENT: CRIU dumps it whole) is passed
// over. Other failures are errors (the dump is then a full one). Counts the pages lifted.
Status lift_protection(int uffd, const std::vector<std::pair<std::uint64_t, std::uint64_t>>& maps,
                       std::uint64_t start, std::uint64_t len, std::uint64_t* pages) {
  static const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t end = (start + len + page - 1) & ~(page - 1);
  start &= ~(page - 1);
  for (const auto& [vma_start, vma_end] : maps) {
    std::uint64_t from = std::max(start, vma_start), to = std::min(end, vma_end);
    if (from >= to) continue;
    uffdio_writeprotect wp{};
    wp.range.start = from;
    wp.range.len = to - from;
    wp.mode = 0;
    if (::ioctl(uffd, UFFDIO_WRITEPROTECT, &wp) == 0)
      *pages += (to - from) / page;
    else if (errno != ENOENT)
      return errno_error("lifting the write protection of pinned host memory");
  }
  return ok();
}

}  // namespace

Status TrackedDump::hand_in(const std::map<pid_t, std::vector<control::HostDmaRange>>& dma,
                            std::uint64_t* lifted_pages) {
  auto& s = *owner_->state_;
  std::lock_guard lock(s.mu);
  auto session = s.sessions.find(session_);
  if (session == s.sessions.end() || !session->second.unsent)
    return Error{Errc::internal, "no tracked dump to hand in"};
  handed_in_ = true;
  const Key key = key_of(key_);
  const int sock = session->second.unsent.get();
  // gcrd goes on serving them until CRIU takes them over (receive(): pid -1), so that no write
  // waits unserved while CRIU starts and freezes the process.
  for (std::uint64_t id : s.uffds_of(key, 0)) {
    const Watched& w = s.watched.at(id);
    auto it = dma.find(w.pid);
    if (it == dma.end() || it->second.empty()) continue;
    auto maps = mappings_of(w.pid);
    for (const control::HostDmaRange& r : it->second)
      GCR_TRY(lift_protection(w.fd.get(), maps, r.address, r.bytes, lifted_pages));
  }
  for (std::uint64_t id : s.uffds_of(key, 0)) {
    const Watched& w = s.watched.at(id);
    GCR_TRY(send_tracked(sock, w.pid, w.fd.get()));
  }
  GCR_TRY(send_tracked(sock, 0, -1));
  // Watched from now: CRIU's list comes back as each task's pages are written.
  session->second.socket =
      s.watch(Watched{Kind::socket, key, session_, 0, std::move(session->second.unsent)});
  if (session->second.socket == 0) return errno_error("watching CRIU's tracking socket");
  return ok();
}

std::size_t TrackedDump::commit(WorkDir images) {
  auto& s = *owner_->state_;
  std::optional<WorkDir> old;
  std::size_t count = 0;
  criu_end_.reset();  // CRIU has exited: with this closed too, its end of the socket reads as EOF
  {
    std::unique_lock lock(s.mu);
    const Key key = key_of(key_);
    // CRIU has exited: its list has come, or its socket has closed.
    bool ended = s.ended_cv.wait_for(lock, std::chrono::seconds(5), [&] {
      auto it = s.sessions.find(session_);
      return it == s.sessions.end() || it->second.ended;
    });
    std::vector<std::uint64_t> ids = s.uffds_of(key, session_);
    if (!ended || ids.empty()) return 0;  // the destructor ends the tracking
    old = s.drop(key);
    HostTracking::State::Process& p = s.tracked[key];
    UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, key_.pid, 0)));
    if (!pidfd || !same_process(key_)) {
      s.tracked.erase(key);
      return 0;
    }
    p.exit_watch = s.watch(Watched{Kind::exit, key, 0, key_.pid, std::move(pidfd)});
    p.images.emplace(std::move(images));
    for (std::uint64_t id : ids) s.watched.at(id).session = 0;
    count = ids.size();
    committed_ = true;
  }
  return count;  // `old` (the previous images) is removed here, outside the lock
}

TrackedDump::~TrackedDump() {
  if (!owner_) return;
  auto& s = *owner_->state_;
  std::optional<WorkDir> gone;
  {
    std::lock_guard lock(s.mu);
    const Key key = key_of(key_);
    bool taken = false;
    if (auto it = s.sessions.find(session_); it != s.sessions.end()) {
      // CRIU has ended (its handle is gone before this): all it said is in the socket.
      if (auto sock = s.watched.find(it->second.socket); sock != s.watched.end())
        s.receive(sock->first, sock->second);
      taken = it->second.taken;
      s.unwatch(it->second.socket);
      s.sessions.erase(it);
    }
    for (std::uint64_t id : s.uffds_of(key, session_)) s.unwatch(id);
    // Not taken (CRIU died, or failed, before it took them): gcrd never stopped serving them and
    // the tracking goes on. Taken and not committed: the protection may have changed since the
    // last dump, so the tracking ends (it ended with CRIU's copies).
    if (!committed_ && handed_in_ && taken) gone = s.drop(key);
  }
}

}  // namespace gcr::gcrd
