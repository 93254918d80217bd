// gcr-keeper: holds a parked process's device memory while gcrd checkpoints it, and gives it back
// if gcrd dies first (Note [Parked memory outlives gcrd] in keeper.h); for a restored process not
// yet given its memory, ends it instead. Started by gcrd only: stdin is gcrd's pipe ("pid N",
// "start TICKS", optionally "mode restore", "pidfile PATH" or "nsroot PID", "nsroot_start TICKS"
// and "ready PATH", "host" (fd 3: gcrd's end of its host-memory server), "criu PID" and
// "criu_start TICKS" (where such a restore runs), "stopped_root PID" per other tree a dump may
// leave stopped with it, "region ADDRESS SIZE
// DEVICE FLAGS" per parked fd 3, 4, ..., "go", and later "done", and around a dump that carries
// TCP connections "tcp_lock NETNS_PID CHAIN", "tcp_end PID FD" and "tcp_unlocked": Note [TCP
// within a job] in daemon/job_tcp.h); stdout/stderr are gcrd's log.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gcr/control.h"
#include "gcr/criu.h"
#include "gcr/process_tree.h"
#include "gcr/tcp_lock.h"

using namespace gcr;

namespace {

bool read_line(std::string& line) {
  line.clear();
  char c;
  for (;;) {
    ssize_t r = read(0, &c, 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    if (c == '\n') return true;
    line += c;
  }
}

bool stopped_untraced(pid_t pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/status").c_str(), "r");
  if (!f) return false;
  char line[256];
  bool stopped = false, traced = false;
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, "State:", 6) == 0) stopped = std::strchr(line, 'T') != nullptr;
    if (std::strncmp(line, "TracerPid:", 10) == 0) traced = std::atoi(line + 10) != 0;
  }
  std::fclose(f);
  return stopped && !traced;
}

// Field 22 of /proc/PID/stat; 0 if the process is gone.
unsigned long long start_time(pid_t pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (!f) return 0;
  char buf[1024];
  std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char* p = std::strrchr(buf, ')');
  if (!p) return 0;
  std::istringstream rest(p + 2);
  std::string field;
  for (int i = 3; i < 22; ++i) rest >> field;
  unsigned long long start = 0;
  rest >> start;
  return start;
}

// The process gcrd named, not another one that got its pid since.
bool alive(pid_t pid, unsigned long long start) {
  return start_time(pid) == start;
}

// Set by "host": gcrd served the restored tasks' host memory, and fd 3 is a duplicate of its end
// (Note [Host memory from the store] in host_pages.h).
bool host_pages = false;

// gcrd died before the restored process got its memory: a parked one is ended (it has nothing to
// run on); one that has its memory, or the load table, is its own guard (op_cow_end). With host
// memory still to come from gcrd, the whole tree is ended at once, whatever its state: CRIU's
// daemon will find no one to ask for the rest.
int end_restored(pid_t pid, unsigned long long start) {
  if (host_pages) {
    if (alive(pid, start)) {
      criu::kill_tree(pid);
      std::fprintf(stderr,
                   "gcr-keeper: restored process %d still had host memory to come from gcrd, "
                   "which died or gave the restore up; ended it (the checkpoint is unchanged: "
                   "restore it again)\n",
                   pid);
    }
    return 0;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!alive(pid, start)) return 0;
    auto client = control::Client::connect(pid, std::chrono::seconds(2));
    if (!client && client.error().code == Errc::not_found) return 0;  // gone, or not under gcr
    if (!client) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      continue;
    }
    auto status = client->status();
    (void)client->close();
    if (status && status->state != control::ProcessState::parked) return 0;
    if (!alive(pid, start)) return 0;
    kill(pid, SIGKILL);
    std::fprintf(stderr,
                 "gcr-keeper: gcrd died before restored process %d got its device memory; ended "
                 "it (the checkpoint is unchanged: restore it again)\n",
                 pid);
    return 0;
  }
  if (alive(pid, start)) kill(pid, SIGKILL);
  std::fprintf(stderr, "gcr-keeper: restored process %d did not answer for a minute; ended it\n",
               pid);
  return 1;
}

// gcrd died while CRIU was restoring: CRIU goes on and writes the restored pid to its pidfile.
// Only a process started after this keeper is taken for the restored one.
int end_restored_from(const std::string& pidfile) {
  const unsigned long long self_start = start_time(getpid());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  while (std::chrono::steady_clock::now() < deadline) {
    std::FILE* f = std::fopen(pidfile.c_str(), "re");
    if (f) {
      long pid = 0;
      bool read = std::fscanf(f, "%ld", &pid) == 1;
      std::fclose(f);
      unsigned long long start = read && pid > 0 ? start_time(static_cast<pid_t>(pid)) : 0;
      if (start == 0 || start < self_start) return 0;  // gone, or not the one CRIU restored
      return end_restored(static_cast<pid_t>(pid), start);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return 0;
}

}  // namespace

// The same for a restore into a new PID namespace: the restored task is found under unshare once
// CRIU's action script has named it; unshare gone first means CRIU failed and took it along.
int end_restored_in_namespace(pid_t nsroot, unsigned long long nsroot_start,
                              const std::string& ready) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!alive(nsroot, nsroot_start)) return 0;
    if (pid_t task = criu::find_restored_in_namespace(nsroot, ready))
      return end_restored(task, start_time(task));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return 0;
}

namespace {

// What gcrd said on the pipe before "go" (or before it died).
struct Instructions {
  pid_t pid = 0;
  unsigned long long start = 0;
  bool restore = false;
  std::string pidfile, ready;
  pid_t nsroot = 0;
  unsigned long long nsroot_start = 0;
  pid_t criu_pid = 0;  // with "host": where the restore runs
  unsigned long long criu_start = 0;
  std::vector<control::ParkedRegion> regions;
  std::vector<pid_t> stopped_roots;
  bool go = false;
};

void read_instruction(const std::string& line, Instructions& k) {
  std::istringstream in(line);
  std::string word;
  in >> word;
  if (word == "pid") {
    in >> k.pid;
  } else if (word == "start") {
    in >> k.start;
  } else if (word == "pidfile") {
    k.pidfile = line.substr(8);
  } else if (word == "nsroot") {
    in >> k.nsroot;
  } else if (word == "nsroot_start") {
    in >> k.nsroot_start;
  } else if (word == "ready") {
    k.ready = line.substr(6);
  } else if (word == "mode") {
    std::string mode;
    in >> mode;
    k.restore = mode == "restore";
  } else if (word == "region") {
    control::ParkedRegion r;
    in >> r.region.address >> r.region.size >> r.region.device >> r.region.flags;
    r.fd = UniqueFd(3 + static_cast<int>(k.regions.size()));
    k.regions.push_back(std::move(r));
  } else if (word == "host") {
    host_pages = true;
  } else if (word == "criu") {
    in >> k.criu_pid;
  } else if (word == "criu_start") {
    in >> k.criu_start;
  } else if (word == "stopped_root") {
    pid_t root = 0;
    if (in >> root && root > 1) k.stopped_roots.push_back(root);
  } else if (word == "go") {
    k.go = true;
  }
}

// gcrd died before "go", while CRIU restored. With host memory it was to serve: CRIU and the tasks
// it is restoring (they have not run the program yet) are ended, or they would wait for pages no
// one serves. Without CRIU's pid: CRIU's daemon must hear that no one serves them (or CRIU waits
// for them for good), and the restored process is ended once it shows up.
int end_unfinished_restore(const Instructions& k) {
  if (host_pages && k.criu_pid > 0 && alive(k.criu_pid, k.criu_start)) {
    criu::kill_tree(k.criu_pid);
    std::fprintf(stderr,
                 "gcr-keeper: gcrd died while CRIU restored a process whose host memory it was to "
                 "serve; ended the restore (the checkpoint is unchanged: restore it again)\n");
    return 0;
  }
  if (host_pages) close(3);
  if (k.restore && !k.pidfile.empty()) return end_restored_from(k.pidfile);
  if (k.restore && k.nsroot > 0 && !k.ready.empty())
    return end_restored_in_namespace(k.nsroot, k.nsroot_start, k.ready);
  return 0;  // gcrd went away while starting us: nothing was handed over
}

// The lock gcrd held on a dump's connections, and the sockets it left in repair mode (until
// "tcp_unlocked").
struct HeldTcp {
  pid_t netns_pid = 0;
  std::string chain;
  std::vector<criu::TcpEnd> ends;
  void read(const std::string& line) {
    std::istringstream in(line);
    std::string word;
    in >> word;
    if (word == "tcp_lock") {
      in >> netns_pid >> chain;
      ends.clear();
    } else if (word == "tcp_end") {
      criu::TcpEnd e;
      if (in >> e.pid >> e.fd) ends.push_back(e);
    } else if (word == "tcp_unlocked") {
      chain.clear();
      ends.clear();
    } else if (word == "tcp_repaired") {  // out of repair mode: their fds may be reused
      ends.clear();
    }
  }
  // gcrd died holding them: the connections must flow again before the processes go on.
  void release() {
    if (chain.empty()) return;
    criu::TcpLock::adopt(netns_pid, chain).release();
    if (auto taken = criu::RepairedSockets::take(ends)) taken->end_repair();
    std::fprintf(stderr, "gcr-keeper: released gcrd's lock on %s and %zu sockets in repair mode\n",
                 chain.c_str(), ends.size());
    chain.clear();
  }
};

// gcrd is gone and never said done: the process is parked with its memory here.
int give_back_parked(const Instructions& k) {
  std::fprintf(stderr,
               "gcr-keeper: gcrd died while process %d was parked; giving it back its %zu "
               "regions\n",
               k.pid, k.regions.size());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!alive(k.pid, k.start)) return 0;
    // A checkpoint without --leave-running leaves the process stopped until gcrd commits: gcrd
    // is gone, so it goes on, with the tree CRIU stopped with it. (Not while CRIU still traces
    // it: that one lets it go itself.)
    for (pid_t p : criu::tree_pids(k.pid))
      if (stopped_untraced(p)) kill(p, SIGCONT);
    for (pid_t root : k.stopped_roots)  // the job's other trees (Note [A job of several trees])
      for (pid_t p : criu::tree_pids(root))
        if (stopped_untraced(p)) kill(p, SIGCONT);
    // Waits while CRIU still has it frozen: its agent thread answers once CRIU is done.
    auto client = control::Client::connect(k.pid, std::chrono::seconds(2));
    if (!client) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      continue;
    }
    auto status = client->status();
    if (status && status->state == control::ProcessState::parked) {
      if (Status s = client->unpark(k.regions); !s) {
        std::fprintf(stderr, "gcr-keeper: unpark of process %d failed: %s\n", k.pid,
                     s.error().message.c_str());
        return 1;
      }
    }
    (void)client->resume();
    (void)client->close();
    std::fprintf(stderr, "gcr-keeper: process %d has its memory back and runs\n", k.pid);
    return 0;
  }
  std::fprintf(stderr, "gcr-keeper: process %d did not answer for 10 minutes; its memory is lost\n",
               k.pid);
  return 1;
}

}  // namespace

int main() {
  signal(SIGPIPE, SIG_IGN);
  Instructions k;
  std::string line;
  while (!k.go && read_line(line)) read_instruction(line, k);
  if (!k.go) return end_unfinished_restore(k);
  if (k.pid <= 0) return 0;
  bool handed = false;  // committed to a migration's destination (Note [Migration])
  HeldTcp tcp;
  while (read_line(line)) {
    if (line == "done") return 0;
    if (line == "handed") handed = true;
    if (line == "kept") handed = false;
    if (line.rfind("tcp_", 0) == 0) tcp.read(line);
  }
  tcp.release();
  if (k.restore) return end_restored(k.pid, k.start);
  if (handed) {
    // The destination may run it already: this copy must not go on.
    std::fprintf(stderr,
                 "gcr-keeper: gcrd died after process %d was handed to a migration's "
                 "destination; ending it here\n",
                 k.pid);
    if (alive(k.pid, k.start)) criu::kill_tree(k.pid);
    return 0;
  }
  return give_back_parked(k);
}
