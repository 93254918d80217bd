// The probes of Note [CRIU's capabilities probed] (gcr/criu_capabilities.h): small dumps and a
// restore of `sleep`s of gcr's own, each shaped as the case a patch fixes or the feature it adds.
#include <fcntl.h>
#include <pty.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "gcr/criu_capabilities.h"

namespace gcr::criu {
namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The last line of `text` that reads as an error (CRIU's "Error (...)" lines), else its last line.
std::string error_line(const std::string& text) {
  std::istringstream in(text);
  std::string last, error;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    if (line.find("FAILED") != std::string::npos) continue;  // "Restoring FAILED.": says no why
    last = line;
    if (line.find("Error") != std::string::npos || line.find("rror:") != std::string::npos)
      error = line;
  }
  std::string out = error.empty() ? last : error;
  if (auto p = out.find(": "); out.rfind("(", 0) == 0 && p != std::string::npos)
    out = out.substr(p + 2);  // "(00.012) Error (criu/x.c:1): what" -> "what"
  return out.size() > 200 ? out.substr(0, 200) + "..." : out;
}

// A directory of the probe's own, gone with it.
class ProbeDir {
 public:
  ProbeDir() {
    std::string t = (fs::temp_directory_path() / "gcr-criu-probe-XXXXXX").string();
    if (::mkdtemp(t.data())) path_ = t;
  }
  ~ProbeDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  ProbeDir(const ProbeDir&) = delete;
  ProbeDir& operator=(const ProbeDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path make(const std::string& name) const {
    std::error_code ec;
    fs::create_directory(path_ / name, ec);
    return path_ / name;
  }

 private:
  fs::path path_;
};

std::optional<fs::path> find_program(const char* name) {
  for (const char* dir : {"/usr/bin/", "/bin/", "/usr/local/bin/"})
    if (::access((std::string(dir) + name).c_str(), X_OK) == 0) return fs::path(dir) / name;
  return std::nullopt;
}

// A process of the probe's: killed with it, and reaped when it is this process's child (a restored
// one may become so where this process is a subreaper: waited for up to a second).
class Child {
 public:
  explicit Child(pid_t pid = 0) : pid_(pid) {}
  Child(Child&& o) noexcept : pid_(std::exchange(o.pid_, 0)) {}
  Child& operator=(Child&&) = delete;
  ~Child() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    for (int i = 0; i < 100; ++i) {
      pid_t r = ::waitpid(pid_, nullptr, WNOHANG);
      if (r == pid_ || (r < 0 && errno != EINTR)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_;
};

// The one child of `parent` once it runs `sleep` (up to 5 s); 0 if it never does.
pid_t sleeping_child_of(pid_t parent) {
  for (int i = 0; i < 500; ++i) {
    std::ifstream children("/proc/" + std::to_string(parent) + "/task/" + std::to_string(parent) +
                           "/children");
    pid_t child = 0;
    if (children >> child && read_text("/proc/" + std::to_string(child) + "/comm") == "sleep\n")
      return child;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return 0;
}

bool sleeping(pid_t pid) {
  for (int i = 0; i < 500; ++i) {
    if (read_text("/proc/" + std::to_string(pid) + "/comm") == "sleep\n") return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// In a child just forked: standard input and output /dev/null, no other file, then argv (made
// before the fork: a child of a process with threads must not allocate).
[[noreturn]] void exec_on_null(const char* const argv[]) {
  int null = ::open("/dev/null", O_RDWR);
  for (int fd = 0; fd < 3; ++fd) ::dup2(null, fd);
  ::close_range(3, ~0U, 0);
  ::execv(argv[0], const_cast<char* const*>(argv));
  ::_exit(127);
}

// `sleep` in a session of its own, its files /dev/null.
Child start_sleep(const fs::path& sleep) {
  const char* const argv[] = {sleep.c_str(), "1000", nullptr};
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setsid();
    exec_on_null(argv);
  }
  Child c(pid > 0 ? pid : 0);
  if (pid > 0 && !sleeping(pid)) return Child();
  return c;
}

std::vector<std::string> dump_command(const fs::path& criu, pid_t pid, const fs::path& images,
                                      const fs::path& plugins) {
  std::vector<std::string> argv = criu_command(criu, "dump");
  for (const std::string& a : {std::string("-t"), std::to_string(pid), std::string("-D"),
                               images.string(), std::string("-L"), plugins.string(),
                               std::string("-o"), std::string("dump.log"), std::string("-v3")})
    argv.push_back(a);
  return argv;
}

// One of gcr's options this CRIU refused ("unrecognized option '--cow-track'"), if any.
std::optional<std::string> unknown_option(const std::string& out,
                                          const std::set<std::string>& options) {
  for (const std::string& o : options)
    if (out.find("unrecognized option '" + o) != std::string::npos ||
        out.find("unrecognized option \"" + o) != std::string::npos)
      return o;
  return std::nullopt;
}

// A (pid, userfaultfd) that CRIU handed over on --cow-track's socket; true if one came.
bool userfaultfd_came_back(int ours, pid_t pid) {
  std::int32_t v = 0;
  UniqueFd fd;  // closed: the protection ends with it
  while (receive_cow_track(ours, &v, &fd))
    if (v == pid && fd)
      return true;
    else if (v == 0)
      return false;
  return false;
}

struct DumpAttempt {
  int rc = -1;
  std::string out;  // CRIU's output and log
  fs::path log;
};

void set(Capabilities& caps, Capability c, bool present, std::string seen) {
  CapabilityState& s = caps.state(c);
  s.present = present;
  s.probed = true;
  s.seen = std::move(seen);
}

// --cow-dump, --cow-track, --cow-dma and CRIU_KDAT_CACHE_DIR: one live dump of a sleep with each
// option this CRIU knows.
void probe_live_dump(const fs::path& criu, const fs::path& sleep, Capabilities& caps) {
  ProbeDir dir;
  Child s = start_sleep(sleep);
  if (dir.path().empty() || s.pid() <= 0) {
    for (Capability c : {Capability::cow_dump, Capability::cow_track, Capability::cow_dma,
                         Capability::kdat_cache_dir})
      set(caps, c, false, "not probed: no directory or no sleep to dump");
    return;
  }
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) sv[0] = sv[1] = -1;
  UniqueFd ours(sv[0]), theirs(sv[1]);
  std::int32_t none = 0;  // the handed-in list: empty
  if (ours && ::write(ours.get(), &none, sizeof none) != sizeof none) ours.reset();
  fs::path dma = dir.path() / "dma";
  std::ofstream(dma) << s.pid() << " 0 100000000000000\n";
  fs::path kdat = dir.make("kdat");
  fs::path plugins = dir.make("plugins");  // none: CRIU's own directory may hold any
  std::set<std::string> options = {"--cow-dump", "--cow-track", "--cow-dma"};
  std::map<Capability, std::string> refused;
  DumpAttempt a;
  for (int attempt = 0; attempt < 4; ++attempt) {
    fs::path images = dir.make("images-" + std::to_string(attempt));
    std::vector<std::string> argv = dump_command(criu, s.pid(), images, plugins);
    argv.push_back("-R");
    if (options.count("--cow-dump")) argv.push_back("--cow-dump");
    if (options.count("--cow-track") && options.count("--cow-dump") && ours)
      for (const char* x : {"--cow-track", "3"}) argv.push_back(x);
    if (options.count("--cow-dma") && options.count("--cow-dump"))
      for (const std::string& x : {std::string("--cow-dma"), dma.string()}) argv.push_back(x);
    std::vector<int> fds;
    if (theirs) fds.push_back(theirs.get());
    auto rc = run(argv, {{"CRIU_KDAT_CACHE_DIR", kdat.string()}}, images / "criu.out", fds);
    a = {rc ? *rc : -1, read_text(images / "criu.out") + read_text(images / "dump.log"),
         images / "dump.log"};
    if (a.rc == 0) break;
    auto o = unknown_option(a.out, options);
    if (!o) break;
    options.erase(*o);
    Capability c = *o == "--cow-dump"    ? Capability::cow_dump
                   : *o == "--cow-track" ? Capability::cow_track
                                         : Capability::cow_dma;
    refused[c] = "this CRIU does not know " + *o;
    if (*o == "--cow-dump") options.clear();  // the other two need it
  }
  theirs.reset();
  auto judge = [&](Capability c, bool did, const std::string& yes, const std::string& no) {
    if (refused.count(c))
      set(caps, c, false, refused[c]);
    else if (c != Capability::cow_dump && refused.count(Capability::cow_dump))
      set(caps, c, false, "needs cow-dump");
    else if (a.rc != 0)
      set(caps, c, false, "a live dump with it failed: " + error_line(a.out));
    else
      set(caps, c, did, did ? yes : no);
  };
  std::string log = read_text(a.log);
  judge(Capability::cow_dump, log.find("ranges write-protected") != std::string::npos,
        "a live dump wrote its pages after the resume",
        "a live dump did not write-protect its pages: " + error_line(log));
  judge(Capability::cow_track, ours && userfaultfd_came_back(ours.get(), s.pid()),
        "a live dump handed its userfaultfd over", "a live dump handed no userfaultfd over");
  judge(Capability::cow_dma, log.find("cow-dma: pid") != std::string::npos,
        "a live dump copied the pages named in the freeze",
        "a live dump did not say it copied the pages named");
  std::error_code ec;
  bool cached = !fs::is_empty(kdat, ec) && !ec;
  set(caps, Capability::kdat_cache_dir, cached,
      cached ? "CRIU kept its kernel probe in the directory named"
             : "CRIU kept its kernel probe elsewhere, or not at all");
}

// The terminal's key as gcr names it (gcr/process_tree.h): tty[RDEV:DEV] in hex.
std::string tty_key(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return {};
  char b[64];
  std::snprintf(b, sizeof b, "tty[%llx:%llx]", static_cast<unsigned long long>(st.st_rdev),
                static_cast<unsigned long long>(st.st_dev));
  return b;
}

// A session leader holding a pseudo-terminal (a shell of gcr's own: it only reaps), and in it, in
// a group of its own, a sleep: a program started from an interactive shell. Sets *job to the
// sleep's pid.
Child start_shell_job(const fs::path& sleep, int terminal, pid_t* job) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return Child();
  pid_t leader = ::fork();
  if (leader == 0) {
    ::setsid();
    ::ioctl(terminal, TIOCSCTTY, 0);
    for (int fd = 0; fd < 3; ++fd) ::dup2(terminal, fd);
    ::dup2(p[1], 3);           // where the job's pid goes
    ::close_range(4, ~0U, 0);  // the master stays outside: the terminal is external to the job
    pid_t j = ::fork();
    if (j == 0) {
      ::close(3);
      ::setpgid(0, 0);
      ::execl(sleep.c_str(), sleep.c_str(), "1000", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    (void)!::write(3, &j, sizeof j);
    ::close(3);
    // As a shell does: reaps the job once CRIU's dump has ended it, so that its pid is free for
    // the restore.
    for (;;)
      if (::waitpid(-1, nullptr, 0) < 0 && errno == ECHILD) ::pause();
  }
  ::close(p[1]);
  Child c(leader > 0 ? leader : 0);
  *job = 0;
  if (leader > 0 && ::read(p[0], job, sizeof *job) != sizeof *job) *job = 0;
  ::close(p[0]);
  if (*job > 0 && !sleeping(*job)) *job = 0;
  return c;
}

// 0001: a shell job dumped with its terminal external, restored with the terminal inherited as
// /dev/null, as gcrd restores it.
void probe_terminal(const fs::path& criu, const fs::path& sleep, Capabilities& caps) {
  ProbeDir dir;
  int master = -1, slave = -1;
  if (dir.path().empty() || ::openpty(&master, &slave, nullptr, nullptr, nullptr) != 0)
    return set(caps, Capability::terminal_onto_any_file, false, "not probed: no pseudo-terminal");
  UniqueFd m(master), sl(slave);
  pid_t job = 0;
  Child leader = start_shell_job(sleep, slave, &job);
  Child job_left(job > 0 ? job : 0);  // should the dump fail and leave it
  std::string key = tty_key(slave);
  if (job <= 0 || key.empty())
    return set(caps, Capability::terminal_onto_any_file, false, "not probed: no shell job");
  fs::path images = dir.make("images"), plugins = dir.make("plugins");
  std::vector<std::string> argv = dump_command(criu, job, images, plugins);
  for (const std::string& a : {std::string("--shell-job"), std::string("--external"), key})
    argv.push_back(a);
  auto rc = run(argv, {}, images / "criu.out");
  if (!rc || *rc != 0)
    return set(caps, Capability::terminal_onto_any_file, false,
               "the dump of a shell job failed: " +
                   error_line(read_text(images / "criu.out") + read_text(images / "dump.log")));
  UniqueFd null(::open("/dev/null", O_RDWR | O_CLOEXEC));
  std::vector<std::string> r = criu_command(criu, "restore");
  for (const std::string& a :
       {std::string("-D"), images.string(), std::string("-L"), plugins.string(), std::string("-o"),
        std::string("restore.log"), std::string("-v3"), std::string("-d"),
        std::string("--shell-job"), std::string("--pidfile"), (images / "pid").string(),
        std::string("--inherit-fd"), "fd[3]:" + key})
    r.push_back(a);
  rc = run(r, {}, images / "restore.out", {null.get()}, true);
  pid_t restored = std::atoi(read_text(images / "pid").c_str());
  Child restored_left(restored > 0 ? restored : 0);
  bool ok = rc && *rc == 0;
  set(caps, Capability::terminal_onto_any_file, ok,
      ok ? "a shell job's terminal was restored onto /dev/null"
         : "a shell job's terminal could not be restored onto /dev/null: " +
               error_line(read_text(images / "restore.out") + read_text(images / "restore.log")));
}

// 0002 (root: a pid namespace): a sleep alone in a pid namespace, its session outside, dumped
// with --shell-job. False where it cannot be set up (no root, no unshare): set-up's record says.
bool probe_session_outside(const fs::path& criu, const fs::path& sleep, Capabilities& caps) {
  auto unshare = find_program("unshare");
  ProbeDir dir;
  if (::geteuid() != 0 || !unshare || dir.path().empty()) return false;
  const char* const unshare_argv[] = {unshare->c_str(), "--pid", "--fork", "--kill-child",
                                      sleep.c_str(),    "1000",  nullptr};
  pid_t pid = ::fork();
  if (pid == 0) exec_on_null(unshare_argv);
  Child outer(pid > 0 ? pid : 0);
  pid_t inner = pid > 0 ? sleeping_child_of(pid) : 0;
  Child inner_left(inner > 0 ? inner : 0);
  if (inner <= 0) return false;
  fs::path images = dir.make("images"), plugins = dir.make("plugins");
  std::vector<std::string> argv = dump_command(criu, inner, images, plugins);
  argv.push_back("--shell-job");
  auto rc = run(argv, {}, images / "criu.out");
  bool ok = rc && *rc == 0;
  set(caps, Capability::session_outside_pidns, ok,
      ok ? "a process whose session leader is outside its pid namespace was dumped"
         : "a process whose session leader is outside its pid namespace could not be dumped: " +
               error_line(read_text(images / "criu.out") + read_text(images / "dump.log")));
  return true;
}

// The patches set-up built the binary with: its record beside it (.gcr-criu-version).
bool built_with_patches(const fs::path& criu) {
  fs::path real = fs::weakly_canonical(criu);
  for (const fs::path& dir : {criu.parent_path(), criu.parent_path().parent_path(),
                              real.parent_path(), real.parent_path().parent_path()}) {
    std::ifstream stamp(dir / ".gcr-criu-version");
    for (std::string line; std::getline(stamp, line);)
      if (line.rfind("patches=", 0) == 0) return line != "patches=none" && line.size() > 8;
  }
  return false;
}

}  // namespace

Capabilities probe_capabilities(const fs::path& criu) {
  Capabilities caps;
  auto sleep = find_program("sleep");
  if (!sleep) {
    for (std::size_t i = 0; i < kCapabilities; ++i)
      set(caps, static_cast<Capability>(i), false, "not probed: no sleep(1) to dump");
    return caps;
  }
  probe_live_dump(criu, *sleep, caps);
  probe_terminal(criu, *sleep, caps);
  std::vector<Capability> recorded{Capability::unprivileged_bounding_set,
                                   Capability::shell_job_group, Capability::lazy_pages_pipelined};
  if (!probe_session_outside(criu, *sleep, caps))
    recorded.push_back(Capability::session_outside_pidns);
  bool patched = built_with_patches(criu);
  for (Capability c : recorded) {
    CapabilityState& s = caps.state(c);
    s.present = patched;
    s.probed = false;
    s.seen = patched ? "from set-up's record: built with gcr's patches"
                     : "from set-up's record: not built with gcr's patches";
  }
  return caps;
}

}  // namespace gcr::criu
