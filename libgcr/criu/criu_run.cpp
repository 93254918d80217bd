// Running CRIU for gcr (gcr/criu.h). Dumps take what the process tree needs from its inspection
// (gcr/process_tree.h: --shell-job, external terminals); restores run CRIU in a session of its own
// with the files the restoring user hands the process (--inherit-fd), and detach (-d) so that
// CRIU hands the process back and exits — except into a new PID namespace, where CRIU stays on as
// the namespace's init.
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>

#include "gcr/criu.h"
#include "gcr/criu_capabilities.h"
#include "gcr/private_dir.h"
#include "gcr/process_tree.h"
#include "gcr/settings.h"
#include "gcr/trusted_path.h"
#include "gcr/unique_fd.h"

extern char** environ;

namespace gcr::criu {
namespace fs = std::filesystem;

namespace {

bool executable(const fs::path& p) {
  return !p.empty() && access(p.c_str(), X_OK) == 0;
}

// The last lines of a CRIU log that say what went wrong, without the harmless ones CRIU always
// logs; when CRIU left no log (it could not start), the tail of its own output next to it.
std::string log_tail(const fs::path& log) {
  std::ifstream in(log);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  if (lines.empty()) {
    std::ifstream out(log.parent_path() / "criu.out");
    for (std::string line; std::getline(out, line);) lines.push_back(line);
  }
  std::string errors;
  for (const auto& l : lines)
    if ((l.find("Error") != std::string::npos || l.find("error") != std::string::npos) &&
        l.find("Can't setup RLIMIT_NOFILE") == std::string::npos)
      errors += "\n    " + l;
  if (errors.empty())
    for (std::size_t i = lines.size() > 5 ? lines.size() - 5 : 0; i < lines.size(); ++i)
      errors += "\n    " + lines[i];
  return errors;
}

// "exit 1", or "killed by signal 9" for run()'s 128 + signal.
std::string how_it_ended(int rc) {
  if (rc > 128 && rc < 128 + 65) return "killed by signal " + std::to_string(rc - 128);
  return "exit " + std::to_string(rc);
}

// The pid CRIU (or its action script) wrote in `file`; 0 if none. Not through a symlink.
pid_t read_pid_file(const fs::path& file) {
  int fd = ::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[32] = {};
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  return n > 0 ? static_cast<pid_t>(std::atol(buf)) : 0;
}

}  // namespace

namespace {

// Whether the running kernel is at least major.minor.
bool kernel_at_least(int major, int minor) {
  utsname u{};
  int ma = 0, mi = 0;
  if (::uname(&u) != 0 || std::sscanf(u.release, "%d.%d", &ma, &mi) != 2) return false;
  return ma > major || (ma == major && mi >= minor);
}

}  // namespace

Result<Tools> find_tools(const fs::path& self_dir) {
  Tools t;
  if (auto c = path_for_root("GCR_CRIU", settings().criu)) t.criu = *c;
  std::vector<fs::path> roots = {self_dir, self_dir.parent_path(),
                                 self_dir.parent_path().parent_path()};
  // A build tree's .deps/criu (set-up's build), an install's lib/gcr/criu (cmake/install.cmake).
  for (const fs::path& r : roots) {
    if (t.criu.empty() && executable(r / ".deps/criu/criu")) t.criu = r / ".deps/criu/criu";
    if (t.criu.empty() && executable(r / "lib/gcr/criu/criu")) t.criu = r / "lib/gcr/criu/criu";
  }
  if (t.criu.empty()) {
    for (const char* p :
         {"/usr/local/sbin/criu", "/usr/sbin/criu", "/usr/local/bin/criu", "/usr/bin/criu"})
      if (executable(p)) {
        t.criu = p;
        break;
      }
  }
  if (!executable(t.criu))
    return Error{Errc::not_found,
                 "CRIU not found; run scripts/setup.sh (it builds CRIU 4.2 into .deps/criu) or set "
                 "GCR_CRIU"};
  if (auto d = path_for_root("GCR_CRIU_PLUGIN_DIR", settings().criu_plugin_dir)) t.plugin_dir = *d;
  for (const fs::path& r : roots)
    for (const char* dir : {"criu-plugin", "lib/gcr/criu-plugin"})
      if (t.plugin_dir.empty() && fs::exists(r / dir / "gcr_criu_plugin.so"))
        t.plugin_dir = r / dir;
  if (t.plugin_dir.empty() || !fs::exists(t.plugin_dir / "gcr_criu_plugin.so"))
    return Error{
        Errc::not_found,
        "gcr's CRIU plugin (gcr_criu_plugin.so) not found; build gcr or set GCR_CRIU_PLUGIN_DIR"};
  // Note [CRIU's capabilities probed] (gcr/criu_capabilities.h)
  const Capabilities& can = capabilities_of(t.criu);
  t.cow_dump = settings().criu_cow_dump && can.has(Capability::cow_dump);
  // Before 6.13 mremap() kept the write protection of the pages it moved, which then read as
  // unchanged at their new address whatever was written there since ("mm: clear uffd-wp PTE/PMD
  // state on mremap()"); --cow-track would take them from the parent.
  t.cow_track = t.cow_dump && settings().criu_cow_track && kernel_at_least(6, 13) &&
                can.has(Capability::cow_track);
  t.cow_dma = t.cow_dump && can.has(Capability::cow_dma);
  t.track_mem = !t.cow_track && settings().criu_track_mem && kernel_tracks_soft_dirty();
  t.can = &can;
  return t;
}

// Note [CRIU's kernel probe cached]
// Every CRIU start probes the kernel (kerndat: 40-60 ms on these VMs, the bulk of a restore's
// CRIU start) unless it finds its cache, which it keeps only when /run is a tmpfs, so that a
// reboot drops it; where /run is on disk it never does. gcr's CRIU takes CRIU_KDAT_CACHE_DIR
// (scripts/criu-patches/0010-kdat-cache-dir.patch): a directory private to this user on /dev/shm
// (a tmpfs: gone at reboot, like the kernel it describes). Private because the cache steers what
// CRIU does (Note [Private directories]). Where it cannot be had, CRIU probes each time. Every
// program started here is CRIU or runs it (a container runtime), so each gets the variable.
const std::string& kdat_cache_dir() {
  static const std::string dir = [] {
    fs::path p = "/dev/shm/gcr-criu-" + std::to_string(geteuid());
    return io::open_private_dir(p, true) ? p.string() : std::string();
  }();
  return dir;
}

namespace {

// Note [CRIU without hardware breakpoints]
// CRIU stops each task where its restorer ends (and, dumping, where the parasite returns) on a
// hardware breakpoint. The kernel makes that breakpoint a perf event bound to the task, and the
// first such event after a second without any turns the scheduler's perf hooks on and waits for an
// RCU grace period (kernel/events/core.c, account_event: synchronize_rcu): 5-15 ms measured here,
// paid while the process is frozen (dump) or before it runs (restore), and only by a checkpoint or
// restore that follows none within a second, so a run of them hid it. Without breakpoints CRIU
// steps each task to its rt_sigreturn over PTRACE_SYSCALL stops instead, a few per thread
// (microseconds). CRIU's one switch for that is its fault-injection variable, FI_NO_BREAKPOINTS
// (criu/include/fault-injection.h), which changes nothing else; set for every program started
// here (a container runtime passes it on to its CRIU), unless the caller set CRIU_FAULT itself.
// Restores that followed a second of quiet went from 27-47 ms to 21-30 ms of CRIU.
constexpr const char* kCriuNoBreakpoints = "130";

// What a restore hands CRIU beyond its arguments: files to inherit, placed at fds 3, 4, ... in
// order, and a session of its own (the restored tasks of a --shell-job restore join CRIU's).
struct SpawnExtras {
  std::vector<int> fds;
  bool new_session = false;
};

// Starts argv (argv[0] a path) with extra environment, stdin /dev/null, stdout and stderr appended
// to `log` when not empty; returns its pid.
Result<pid_t> spawn(const std::vector<std::string>& argv,
                    const std::map<std::string, std::string>& caller_env, const fs::path& log,
                    const SpawnExtras& extras = {}) {
  std::map<std::string, std::string> env = caller_env;
  // A cache of CRIU's kernel probe steers what CRIU does: as root, one another user could write is
  // replaced by gcr's own.
  if (!env.count("CRIU_KDAT_CACHE_DIR") && !env_path_for_root("CRIU_KDAT_CACHE_DIR") &&
      !kdat_cache_dir().empty())
    env["CRIU_KDAT_CACHE_DIR"] = kdat_cache_dir();
  // Note [CRIU without hardware breakpoints]
  if (!env.count("CRIU_FAULT") && !std::getenv("CRIU_FAULT"))
    env["CRIU_FAULT"] = kCriuNoBreakpoints;
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos && env.count(kv.substr(0, eq))) continue;
    envs.push_back(kv);
  }
  for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : envs) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  // The inherited files go to 3, 4, ... from copies numbered above all of them.
  std::vector<UniqueFd> high;
  for (int fd : extras.fds) {
    high.emplace_back(fcntl(fd, F_DUPFD_CLOEXEC, static_cast<int>(3 + extras.fds.size())));
    if (!high.back()) {
      posix_spawn_file_actions_destroy(&actions);
      return errno_error("duplicating a file to hand to CRIU");
    }
  }
  for (std::size_t i = 0; i < high.size(); ++i)
    posix_spawn_file_actions_adddup2(&actions, high[i].get(), static_cast<int>(3 + i));
  // Nothing else of the caller's (gcrd's sockets, a held allocation's fd) leaks into CRIU, which,
  // in a new PID namespace, outlives the call.
  posix_spawn_file_actions_addclosefrom_np(&actions, static_cast<int>(3 + high.size()));
  if (!log.empty()) {
    // Not O_CLOEXEC: this open is the child's fd 1 itself, which exec must keep.
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  }
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  if (extras.new_session) posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  pid_t child;
  int rc = posix_spawn(&child, cargv[0], &actions, &attr, cargv.data(), cenv.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return errno_error("starting " + argv[0], rc);
  return child;
}

// The last NSpid of /proc/PID/status: the pid as its own (innermost) PID namespace sees it.
pid_t pid_in_own_namespace(pid_t pid) {
  auto nspid = process_status_field(pid, "NSpid");
  if (!nspid) return 0;
  std::istringstream fields(*nspid);
  pid_t last = 0;
  for (pid_t p; fields >> p;) last = p;
  return last;
}

std::optional<fs::path> find_util_linux(const char* name) {
  for (const char* dir : {"/usr/bin/", "/bin/", "/usr/local/bin/"})
    if (executable(std::string(dir) + name)) return fs::path(std::string(dir) + name);
  return std::nullopt;
}

}  // namespace

namespace {
// A waitpid status as an exit code: the exit status, or 128 + the signal that ended it.
int exit_code_of(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

// Reaps `child`: its exit status, or 128 + the signal that ended it.
Result<int> wait_exit_code(pid_t child, const std::string& what) {
  int status = 0;
  while (waitpid(child, &status, 0) < 0)
    if (errno != EINTR) return errno_error("waiting for " + what);
  return exit_code_of(status);
}

Result<int> run_and_wait(const std::vector<std::string>& argv,
                         const std::map<std::string, std::string>& env, const fs::path& log,
                         const SpawnExtras& extras) {
  GCR_TRY_ASSIGN(pid_t child, spawn(argv, env, log, extras));
  return wait_exit_code(child, argv[0]);
}

// A gcrd that is not root runs CRIU with --unprivileged: CRIU then needs CAP_CHECKPOINT_RESTORE
// (and CAP_SYS_PTRACE) as file capabilities of its binary, and works on its user's processes only.
void privilege_arguments(std::vector<std::string>& argv) {
  if (geteuid() != 0) argv.push_back("--unprivileged");
}

// --shell-job, --tcp-close and one --inherit-fd per inherited file (at fd 3, 4, ...), and those
// files for spawn().
void restore_arguments(const RestoreOptions& o, std::vector<std::string>& argv,
                       SpawnExtras& extras) {
  privilege_arguments(argv);
  if (o.lazy_pages) argv.push_back("--lazy-pages");
  if (o.shell_job) argv.push_back("--shell-job");
  if (o.tcp_close) argv.push_back("--tcp-close");
  if (o.tcp_established)
    for (const char* a : {"--tcp-established", "--network-lock", "skip"}) argv.push_back(a);
  for (const auto& in : o.inherit) {
    argv.push_back("--inherit-fd");
    argv.push_back("fd[" + std::to_string(3 + extras.fds.size()) + "]:" + in.key);
    extras.fds.push_back(in.fd);
  }
  extras.new_session = true;
}
}  // namespace

Result<int> run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                const fs::path& log) {
  return run_and_wait(argv, env, log, {});
}

Result<int> run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                const fs::path& log, const std::vector<int>& inherit, bool new_session) {
  SpawnExtras extras;
  extras.fds = inherit;
  extras.new_session = new_session;
  return run_and_wait(argv, env, log, extras);
}

std::vector<std::string> criu_command(const fs::path& criu, const char* command) {
  std::vector<std::string> argv = {criu.string(), command};
  privilege_arguments(argv);
  return argv;
}

namespace {

// CRIU's fd for o.cow_track_socket, which joins `extras` after the fds there; -1 when CRIU does
// not get it.
int pass_cow_track(const Tools& tools, const DumpOptions& o, SpawnExtras& extras) {
  if (!(o.leave_running && o.cow_dump && tools.cow_dump && tools.cow_track &&
        o.cow_track_socket >= 0))
    return -1;
  extras.fds.push_back(o.cow_track_socket);
  return static_cast<int>(2 + extras.fds.size());  // spawn() puts extras.fds at 3, 4, ...
}

// CRIU's fd for o.cow_dma_fd, the same way; -1 when CRIU does not get it.
int pass_cow_dma(const Tools& tools, const DumpOptions& o, SpawnExtras& extras) {
  if (!(o.leave_running && o.cow_dump && tools.cow_dump && tools.cow_dma && o.cow_dma_fd >= 0))
    return -1;
  extras.fds.push_back(o.cow_dma_fd);
  return static_cast<int>(2 + extras.fds.size());
}

// track_fd, dma_fd: CRIU's fds for --cow-track and --cow-dma, -1 for none.
std::vector<std::string> dump_argv(const Tools& tools, const DumpOptions& o, int track_fd,
                                   int dma_fd) {
  std::vector<std::string> argv = {
      tools.criu.string(),
      "dump",
      "-t",
      std::to_string(o.pid),
      "-D",
      o.image_dir.string(),
      "-L",
      tools.plugin_dir.string(),
      "-o",
      "dump.log",
      "-v3"};  // -v4 logs every page run of the pagemap, inside the freeze
  privilege_arguments(argv);
  if (o.leave_running) argv.push_back("-R");
  if (o.leave_running && o.cow_dump && tools.cow_dump) {
    argv.push_back("--cow-dump");
    if (track_fd >= 0) {
      argv.push_back("--cow-track");
      argv.push_back(std::to_string(track_fd));
      if (!o.prev_images.empty()) {
        argv.push_back("--prev-images-dir");
        argv.push_back(o.prev_images.string());
      }
    }
    if (dma_fd >= 0) {  // read through /proc: a new open file, from its start
      argv.push_back("--cow-dma");
      argv.push_back("/proc/self/fd/" + std::to_string(dma_fd));
    }
  }
  if (o.track_mem) {
    argv.push_back("--track-mem");
    if (!o.prev_images.empty()) {
      argv.push_back("--prev-images-dir");
      argv.push_back(o.prev_images.string());
    }
  }
  if (o.leave_stopped && !o.leave_running) argv.push_back("--leave-stopped");
  argv.insert(argv.end(), o.extra_args.begin(), o.extra_args.end());
  return argv;
}

std::map<std::string, std::string> dump_env(const DumpOptions& o) {
  auto env = o.env;
  if (o.leave_running || o.leave_stopped) env["GCR_LEAVE_RUNNING"] = "1";  // the tasks stay
  return env;
}

Status dump_result(int rc, const DumpOptions& o) {
  if (rc == 0) return ok();
  fs::path log = o.image_dir / "dump.log";
  return Error{Errc::io_error, "criu dump of pid " + std::to_string(o.pid) + " failed (" +
                                   how_it_ended(rc) + "); from " + log.string() + ":" +
                                   log_tail(log)};
}

}  // namespace

Status dump(const Tools& tools, const DumpOptions& o) {
  GCR_TRY(check_unprivileged_criu(tools.criu));
  SpawnExtras extras;
  int track_fd = pass_cow_track(tools, o, extras);
  int dma_fd = pass_cow_dma(tools, o, extras);
  GCR_TRY_ASSIGN(int rc, run_and_wait(dump_argv(tools, o, track_fd, dma_fd), dump_env(o),
                                      o.image_dir / "criu.out", extras));
  return dump_result(rc, o);
}

Result<StartedDump> StartedDump::start(const Tools& tools, const DumpOptions& o,
                                       std::chrono::seconds timeout) {
  GCR_TRY(check_unprivileged_criu(tools.criu));
  int p[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) != 0)
    return errno_error("creating the socket that starts CRIU's dump");
  UniqueFd ours(p[0]), criu_end(p[1]);
  auto env = dump_env(o);
  env["GCR_DUMP_GO_FD"] = "3";  // spawn() puts extras.fds at 3, 4, ...
  SpawnExtras extras;
  extras.fds = {criu_end.get()};
  int track_fd = pass_cow_track(tools, o, extras);
  int dma_fd = pass_cow_dma(tools, o, extras);
  std::vector<std::string> argv = dump_argv(tools, o, track_fd, dma_fd);
  argv.push_back("--timeout");
  argv.push_back(std::to_string(timeout.count()));
  GCR_TRY_ASSIGN(pid_t child, spawn(argv, env, o.image_dir / "criu.out", extras));
  return StartedDump(child, std::move(ours), o);
}

StartedDump::StartedDump(pid_t criu, UniqueFd go, DumpOptions options)
    : criu_(criu), go_(std::move(go)), options_(std::move(options)) {}

StartedDump::StartedDump(StartedDump&& other) noexcept
    : criu_(std::exchange(other.criu_, 0)),
      go_(std::move(other.go_)),
      options_(std::move(other.options_)) {}

StartedDump::~StartedDump() {
  go_.reset();  // no go: the plugin fails the dump before anything is frozen
  if (criu_ > 0) (void)wait_exit_code(criu_, "criu");
}

Status StartedDump::wait_ready(std::chrono::milliseconds limit) {
  if (criu_ <= 0 || !go_) return Error{Errc::internal, "this CRIU dump was already let go"};
  pollfd p{go_.get(), POLLIN, 0};
  int n;
  do n = ::poll(&p, 1, static_cast<int>(limit.count()));
  while (n < 0 && errno == EINTR);
  char ready = 0;
  if (n > 0 && ::recv(go_.get(), &ready, 1, 0) == 1 && ready == 'r') return ok();
  go_.reset();
  if (n == 0) {
    ::kill(criu_, SIGKILL);
    (void)wait_exit_code(std::exchange(criu_, 0), "criu");
    return Error{Errc::timeout, "CRIU did not get ready to dump pid " +
                                    std::to_string(options_.pid) + " within " +
                                    std::to_string(limit.count()) + " ms; see " +
                                    (options_.image_dir / "dump.log").string()};
  }
  // It ended (or failed) before the freeze.
  GCR_TRY_ASSIGN(int rc, wait_exit_code(std::exchange(criu_, 0), "criu"));
  return dump_result(rc == 0 ? 1 : rc, options_);
}

Status StartedDump::go_and_wait() {
  if (criu_ <= 0) return Error{Errc::internal, "this CRIU dump was already waited for"};
  // A CRIU that already failed has closed its end: the write fails (gcrd ignores SIGPIPE), and
  // its exit status says why.
  if (go_) {
    (void)::send(go_.get(), "g", 1, MSG_NOSIGNAL);  // CRIU gone: its exit status says why
    go_.reset();
  }
  GCR_TRY_ASSIGN(int rc, wait_exit_code(std::exchange(criu_, 0), "criu"));
  return dump_result(rc, options_);
}

namespace {

// The pid that traces `pid` (TracerPid in /proc/PID/status): 0 if none, -1 if it is gone.
pid_t tracer_of(pid_t pid) {
  auto tracer = process_status_field(pid, "TracerPid");
  return tracer ? static_cast<pid_t>(std::atoi(tracer->c_str())) : -1;
}

}  // namespace

bool StartedDump::go_until_released(Status* ended) {
  if (criu_ <= 0) {
    *ended = Error{Errc::internal, "this CRIU dump was already waited for"};
    return false;
  }
  if (go_) {
    (void)::send(go_.get(), "g", 1, MSG_NOSIGNAL);
    go_.reset();
  }
  // Seized (CRIU traces it), then released (nobody does): CRIU let it run. Polled each 0.5 ms;
  // a freeze too short to be seen is waited out as CRIU's exit, as go_and_wait() does.
  bool seized = false;
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(criu_, &status, WNOHANG);
    if (r == criu_) {
      criu_ = 0;
      *ended = dump_result(exit_code_of(status), options_);
      return false;
    }
    if (r < 0 && errno != EINTR) {
      *ended = go_and_wait();
      return false;
    }
    pid_t tracer = tracer_of(options_.pid);
    if (tracer == criu_ || (tracer > 0 && !seized))
      seized = true;
    else if (seized && tracer == 0)
      return true;
    ::usleep(500);
  }
}

namespace {

// unshare --pid --fork --kill-child --mount-proc criu restore ... (without -d: criu is the new
// namespace's init). Readiness comes from an action script CRIU runs once the tasks are resumed;
// the restored process is then criu's child, criu unshare's.
Status restore_in_new_pid_namespace(const Tools& tools, const RestoreOptions& o) {
  fs::path log = o.image_dir / "restore.log";
  auto unshare = find_util_linux("unshare");
  if (!unshare)
    return Error{Errc::not_found,
                 "restoring into a new PID namespace needs unshare(1) (util-linux); install it"};
  fs::path ready = o.image_dir / "restored.ready";
  fs::path script = o.image_dir / "gcr-action-script.sh";
  {
    // A new file, never one found there (O_EXCL, O_NOFOLLOW): CRIU runs it as gcrd's user.
    std::string text =
        "#!/bin/sh\n[ \"$CRTOOLS_SCRIPT_ACTION\" = post-resume ] || exit 0\necho "
        "\"$CRTOOLS_INIT_PID\" > '" +
        ready.string() + ".tmp' && mv '" + ready.string() + ".tmp' '" + ready.string() + "'\n";
    int fd = ::open(script.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0700);
    bool written =
        fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    if (fd >= 0) ::close(fd);
    if (!written) return errno_error("cannot write " + script.string());
  }
  std::vector<std::string> argv;
  if (!o.netns.empty()) {  // nsenter enters it and execs unshare: the same process
    auto nsenter = find_util_linux("nsenter");
    if (!nsenter)
      return Error{Errc::not_found,
                   "restoring into a network namespace needs nsenter(1) (util-linux); install it"};
    argv = {nsenter->string(), "--net=" + o.netns.string(), "--"};
  }
  argv.insert(argv.end(), {unshare->string(), "--pid", "--fork", "--kill-child", "--mount-proc"});
  if (!o.hostname.empty())  // a UTS namespace of its own, named before criu runs (as the init)
    argv.insert(argv.end(),
                {"--uts", "/bin/sh", "-c",
                 "printf %s \"$0\" > /proc/sys/kernel/hostname && exec \"$@\"", o.hostname});
  argv.insert(argv.end(), {tools.criu.string(), "restore", "-D", o.image_dir.string(), "-L",
                           tools.plugin_dir.string(), "--action-script", script.string(), "-o",
                           "restore.log", "-v4"});
  SpawnExtras extras;
  restore_arguments(o, argv, extras);
  GCR_TRY_ASSIGN(pid_t child, spawn(argv, o.env, o.image_dir / "criu.out", extras));
  if (o.on_spawned) o.on_spawned(child);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  for (;;) {
    if (fs::exists(ready)) break;
    int status = 0;
    if (waitpid(child, &status, WNOHANG) == child)
      return Error{Errc::io_error, "criu restore in a new PID namespace failed (" +
                                       std::string(WIFSIGNALED(status) ? "signal " : "exit ") +
                                       std::to_string(WIFSIGNALED(status) ? WTERMSIG(status)
                                                                          : WEXITSTATUS(status)) +
                                       "); from " + log.string() + ":" + log_tail(log)};
    if (std::chrono::steady_clock::now() > deadline) {
      kill(child, SIGKILL);
      waitpid(child, nullptr, 0);
      return Error{Errc::timeout,
                   "criu restore did not finish within 10 minutes; see " + log.string()};
    }
    usleep(2000);
  }
  // unshare -> criu (the namespace's init) -> the restored root task, which is the child of criu
  // whose pid in the namespace is the one the action script wrote (criu's other children, such
  // as that very script, are not it).
  pid_t restored = find_restored_in_namespace(child, ready);
  // unshare waits for criu, which reaps the namespace until the restored tree exits: whoever
  // waits for unshare must not be this call.
  std::thread([child] { waitpid(child, nullptr, 0); }).detach();
  if (!restored)
    return Error{Errc::internal,
                 "criu restored the process in a new PID namespace, but it is not to be found "
                 "under unshare (pid " +
                     std::to_string(child) + ")"};
  if (o.restored_pid) *o.restored_pid = restored;
  return ok();
}

}  // namespace

pid_t find_restored_in_namespace(pid_t unshare_pid, const fs::path& ready_file) {
  pid_t inner = read_pid_file(ready_file);
  if (inner <= 0) return 0;
  for (pid_t criu : children_of(unshare_pid))
    for (pid_t task : children_of(criu))
      if (pid_in_own_namespace(task) == inner) return task;
  return 0;
}

bool lazy_pages_available(const Tools& tools) {
  if (!settings().criu_lazy_pages) return false;  // GCR_CRIU_LAZY_PAGES=0
  static std::mutex mu;
  static std::map<std::string, bool> known;
  std::lock_guard lock(mu);
  if (auto it = known.find(tools.criu.string()); it != known.end()) return it->second;
  std::vector<std::string> argv = {tools.criu.string(), "check", "--feature", "uffd-noncoop"};
  privilege_arguments(argv);
  auto rc = run_and_wait(argv, {}, "/dev/null", {});
  return known[tools.criu.string()] = rc && *rc == 0;
}

LazyPages::~LazyPages() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  (void)wait_exit_code(pid_, "criu lazy-pages");
}

Status LazyPages::ended_with(int rc) {
  pid_ = 0;
  if (rc != 0)
    return Error{Errc::io_error, "criu lazy-pages failed (" + how_it_ended(rc) +
                                     ") before the restored memory was all in; from " +
                                     log_.string() + ":" + log_tail(log_)};
  return ok();
}

Status LazyPages::wait() {
  if (pid_ <= 0) return ok();
  GCR_TRY_ASSIGN(int rc, wait_exit_code(pid_, "criu lazy-pages"));
  return ended_with(rc);
}

std::optional<Status> LazyPages::poll() {
  if (pid_ <= 0) return ok();
  int status = 0;
  pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == 0) return std::nullopt;
  if (r < 0) return errno_error("waiting for criu lazy-pages");
  return ended_with(exit_code_of(status));
}

namespace {

// Note [Host memory restored lazily]: the daemon, listening on lazy-pages.socket in the image
// directory (where `criu restore --lazy-pages` looks for it) before the restore connects: it says
// so on --status-fd once it listens. In a session of its own: it outlives gcrd, as the pages it
// holds must reach the process.
// A child of ours that is killed and reaped unless released (an error or an exception on the way).
class OwnedChild {
 public:
  OwnedChild(pid_t pid, const char* what) : pid_(pid), what_(what) {}
  OwnedChild(OwnedChild&& o) noexcept : pid_(std::exchange(o.pid_, 0)), what_(o.what_) {}
  OwnedChild& operator=(OwnedChild&&) = delete;
  ~OwnedChild() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    (void)wait_exit_code(pid_, what_);
  }
  pid_t get() const { return pid_; }
  pid_t release() { return std::exchange(pid_, 0); }

 private:
  pid_t pid_;
  const char* what_;
};

struct StartingDaemon {
  OwnedChild child;
  UniqueFd ready;  // --status-fd's reading end
};

Result<StartingDaemon> spawn_lazy_pages(const Tools& tools, const RestoreOptions& o) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return errno_error("creating a pipe for criu lazy-pages");
  UniqueFd ready(p[0]), ready_w(p[1]);
  std::vector<std::string> argv = {
      tools.criu.string(), "lazy-pages", "-D", o.image_dir.string(), "-o", "lazy-pages.log", "-v2",
      "--status-fd",       "3"};
  if (o.lazy_pages_socket >= 0) {
    argv.insert(argv.end(), {"--page-server", "--ps-socket", "4"});
  }
  privilege_arguments(argv);
  SpawnExtras extras;
  extras.fds.push_back(ready_w.get());                                      // fd 3
  if (o.lazy_pages_socket >= 0) extras.fds.push_back(o.lazy_pages_socket);  // fd 4
  extras.new_session = true;
  GCR_TRY_ASSIGN(pid_t pid, spawn(argv, o.env, o.image_dir / "lazy-pages.out", extras));
  return StartingDaemon{OwnedChild(pid, "criu lazy-pages"), std::move(ready)};
}

// Waits (up to 10 s) until the daemon listens: its pid, released to the caller. Else kills and
// reaps it and says why.
Result<pid_t> daemon_listening(StartingDaemon& d, const RestoreOptions& o) {
  pollfd pfd{d.ready.get(), POLLIN, 0};
  int n;
  do n = ::poll(&pfd, 1, 10'000);
  while (n < 0 && errno == EINTR);
  char c = 0;
  if (n == 1 && ::read(d.ready.get(), &c, 1) == 1) return d.child.release();
  pid_t pid = d.child.release();
  ::kill(pid, SIGKILL);
  GCR_TRY_ASSIGN(int rc, wait_exit_code(pid, "criu lazy-pages"));
  fs::path log = o.image_dir / "lazy-pages.log";
  return Error{Errc::io_error,
               "criu lazy-pages did not start (" +
                   (rc == 128 + SIGKILL ? std::string("no answer in 10 s") : how_it_ended(rc)) +
                   "); from " + log.string() + ":" + log_tail(log)};
}

std::vector<std::string> restore_argv(const Tools& tools, const RestoreOptions& o,
                                      const fs::path& pidfile) {
  return {tools.criu.string(),
          "restore",
          "-D",
          o.image_dir.string(),
          "-L",
          tools.plugin_dir.string(),
          "-d",
          "--pidfile",
          pidfile.string(),
          "-o",
          "restore.log",
          "-v4"};
}

Status restore_exit_code(pid_t child, const RestoreOptions& o) {
  GCR_TRY_ASSIGN(int rc, wait_exit_code(child, "criu"));
  if (rc == 0) return ok();
  fs::path log = o.image_dir / "restore.log";
  return Error{Errc::io_error, "criu restore failed (" + how_it_ended(rc) + "); from " +
                                   log.string() + ":" + log_tail(log)};
}

// Note [Lazy-pages daemon started beside the restore]
// The daemon must listen before `criu restore` connects to it, which CRIU does right after gcr's
// plugin's init (cr_restore_tasks: prepare_lazy_pages_socket follows cr_plugin_init). Started one
// after the other, the restore's own start (exec, kernel feature detection, its first images)
// waited for the daemon's (52 ms here, where /run is no tmpfs and CRIU keeps no cache of the
// kernel's features), all of it before the process runs. So both start at once: the restore
// inherits a socket as GCR_RESTORE_GO_FD, on which gcr's plugin, at its init, says it waits ('w')
// and waits for gcrd's go ('g'), sent once the daemon listens. A daemon that does not start closes
// the socket without a go: the plugin fails the restore before CRIU has made any process, and the
// restore runs again the usual way (host memory in before the process runs), or fails when only
// the daemon could bring that memory (lazy_pages_socket). A plugin in plugin_dir that does not
// wait (another gcr's) lets CRIU connect whenever it gets there: when that restore fails without
// the plugin having said 'w', it runs once more, the daemon listening by then.
struct BesideOutcome {
  Status status = ok();
  pid_t daemon = 0;            // once it listens: the caller's to own
  bool plugin_waited = false;  // gcr's plugin said it waits for the go
};

BesideOutcome restore_beside_daemon(const Tools& tools, const RestoreOptions& o,
                                    const fs::path& pidfile) {
  BesideOutcome out;
  auto starting = spawn_lazy_pages(tools, o);
  if (!starting) {
    out.status = std::move(starting).error();
    return out;
  }
  int p[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) != 0) {
    out.status = errno_error("creating the socket that starts CRIU's restore");
    return out;
  }
  UniqueFd go(p[0]), criu_end(p[1]);
  std::vector<std::string> argv = restore_argv(tools, o, pidfile);
  SpawnExtras extras;
  extras.fds.push_back(criu_end.get());  // fd 3, before restore_arguments numbers the rest
  restore_arguments(o, argv, extras);
  auto env = o.env;
  env["GCR_RESTORE_GO_FD"] = "3";
  auto spawned = spawn(argv, env, o.image_dir / "criu.out", extras);
  criu_end.reset();
  if (!spawned) {
    out.status = std::move(spawned).error();
    return out;
  }
  OwnedChild criu(*spawned, "criu");
  if (o.on_spawned) o.on_spawned(criu.get());
  Result<pid_t> listening = daemon_listening(*starting, o);
  if (listening) {
    out.daemon = *listening;
    if (o.before_criu) o.before_criu();
    (void)::send(go.get(), "g", 1, MSG_NOSIGNAL);  // CRIU gone: its exit status says why
  } else {
    go.reset();  // no go: the plugin fails the restore before any process exists
  }
  Status ended = restore_exit_code(criu.release(), o);
  char said = 0;
  out.plugin_waited = go && ::recv(go.get(), &said, 1, MSG_DONTWAIT) == 1 && said == 'w';
  out.status = listening ? std::move(ended) : Status(std::move(listening).error());
  return out;
}

}  // namespace

namespace {
// An inherited terminal (a shell job's) needs terminal-onto-any-file (Note [CRIU's capabilities
// probed] in gcr/criu_capabilities.h): refused before CRIU starts without it.
Status terminal_restorable(const Tools& tools, const RestoreOptions& options) {
  for (const auto& in : options.inherit)
    if (in.key.rfind("tty[", 0) == 0 && tools.can &&
        !tools.can->has(Capability::terminal_onto_any_file))
      return Error{Errc::unsupported,
                   "this process had a terminal of a session outside it (it was started from an "
                   "interactive shell), which this CRIU cannot restore onto another file (it lacks "
                   "terminal-onto-any-file, " +
                       std::string(info(Capability::terminal_onto_any_file).patch) +
                       "): restore it with gcr's CRIU (scripts/setup.sh)"};
  return ok();
}
}  // namespace

Status restore(const Tools& tools, const RestoreOptions& options) {
  GCR_TRY(check_unprivileged_criu(tools.criu));
  GCR_TRY(terminal_restorable(tools, options));
  if ((!options.netns.empty() || !options.hostname.empty()) && !options.new_pid_namespace)
    return Error{Errc::invalid_argument,
                 "a restore into network or UTS namespaces of its own is one into a PID namespace "
                 "of its own too"};
  RestoreOptions o = options;
  LazyPages lazy;                   // the daemon until the restore has succeeded, then the caller's
  auto adopt = [&](pid_t daemon) {  // a listening daemon
    lazy.pid_ = daemon;
    lazy.log_ = o.image_dir / "lazy-pages.log";
  };
  auto hand_over = [&] {
    if (!o.lazy_pages) return;
    std::swap(o.lazy_pages->pid_, lazy.pid_);
    o.lazy_pages->log_ = lazy.log_;
  };
  fs::path pidfile = o.image_dir / "restored.pid";
  std::error_code ec;
  if (o.lazy_pages && !o.new_pid_namespace &&
      fs::exists(tools.plugin_dir / "gcr_criu_plugin.so", ec)) {
    fs::remove(pidfile, ec);
    BesideOutcome beside = restore_beside_daemon(tools, o, pidfile);
    if (beside.daemon) adopt(beside.daemon);
    if (beside.status) {
      if (o.restored_pid) *o.restored_pid = read_pid_file(pidfile);
      hand_over();
      return ok();
    }
    if (lazy.running() && !beside.plugin_waited) {
      std::fprintf(stderr, "gcr: %s; restoring again, now that the lazy-pages daemon listens\n",
                   beside.status.error().message.c_str());
    } else if (lazy.running() || o.lazy_pages_socket >= 0) {
      return std::move(beside.status).error();
    } else {  // the daemon did not start; CRIU made nothing: the usual way
      std::fprintf(stderr, "gcr: %s; restoring host memory before the process runs\n",
                   beside.status.error().message.c_str());
      o.lazy_pages = nullptr;
    }
  }
  if (o.lazy_pages && !lazy.running()) {
    auto daemon = spawn_lazy_pages(tools, o);
    Result<pid_t> pid =
        daemon ? daemon_listening(*daemon, o) : Result<pid_t>(std::move(daemon).error());
    if (pid) {
      adopt(*pid);
    } else if (o.lazy_pages_socket >= 0) {
      // The images lack the pages the daemon was to bring: no restore without it.
      return std::move(pid).error();
    } else {  // the restore goes on, the usual way
      std::fprintf(stderr, "gcr: %s; restoring host memory before the process runs\n",
                   pid.error().message.c_str());
      o.lazy_pages = nullptr;
    }
  }
  if (o.before_criu) o.before_criu();
  if (o.new_pid_namespace) {
    GCR_TRY(restore_in_new_pid_namespace(tools, o));
    hand_over();
    return ok();
  }
  fs::remove(pidfile, ec);
  std::vector<std::string> argv = restore_argv(tools, o, pidfile);
  SpawnExtras extras;
  restore_arguments(o, argv, extras);
  GCR_TRY_ASSIGN(pid_t child, spawn(argv, o.env, o.image_dir / "criu.out", extras));
  OwnedChild criu(child, "criu");
  if (o.on_spawned) o.on_spawned(child);
  GCR_TRY(restore_exit_code(criu.release(), o));
  if (o.restored_pid) *o.restored_pid = read_pid_file(pidfile);
  hand_over();
  return ok();
}

bool receive_cow_track(int sock, std::int32_t* pid, UniqueFd* fd) {
  char control[CMSG_SPACE(sizeof(int))];
  std::int32_t v = 0;
  iovec iov{&v, sizeof v};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  ssize_t n;
  do n = ::recvmsg(sock, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
  *pid = 0;
  fd->reset();
  if (n != static_cast<ssize_t>(sizeof v)) return true;  // EOF or garbage: the end
  if (cmsghdr* h = CMSG_FIRSTHDR(&m); h && h->cmsg_level == SOL_SOCKET &&
                                      h->cmsg_type == SCM_RIGHTS &&
                                      h->cmsg_len == CMSG_LEN(sizeof(int))) {
    int got;
    std::memcpy(&got, CMSG_DATA(h), sizeof got);
    fd->reset(got);
  }
  if (v == -1 && !fd->valid())
    *pid = -1;
  else
    *pid = v > 0 && fd->valid() ? v : 0;
  return true;
}

}  // namespace gcr::criu
