// gcr doctor: each check finds one thing gcr uses and says whether it is there, what it is, and
// (when it is not) what to do. Required checks decide the exit code: 0 when gcr can checkpoint
// and restore here, 8 (unsupported) when it cannot; optional ones only say what a user would miss.
#include "cmd_doctor.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <linux/magic.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "exit_codes.h"
#include "gcr/criu.h"
#include "gcr/criu_capabilities.h"
#include "gcr/human_output.h"
#include "gcr/json.h"
#include "gcrd_client.h"
#include "kernel_tracer.h"
#include "paths.h"

namespace gcr::cli {
namespace {
namespace fs = std::filesystem;

enum class State { ok, warn, missing };

struct Check {
  std::string name;
  State state = State::ok;
  std::string detail;     // what was found
  std::string fix;        // what to do, when not ok
  bool required = false;  // gcr cannot checkpoint or restore without it
};

const char* state_name(State s) {
  switch (s) {
    case State::ok:
      return "ok";
    case State::warn:
      return "warn";
    case State::missing:
      return "missing";
  }
  return "?";
}

// First line of a command's output (stdout and stderr), and its exit status.
std::pair<int, std::string> run_capture(const std::string& command) {
  std::string out;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (!p) return {-1, ""};
  std::array<char, 512> buf{};
  while (std::fgets(buf.data(), buf.size(), p)) out += buf.data();
  int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string last_line(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  auto nl = text.rfind('\n');
  return nl == std::string::npos ? text : text.substr(nl + 1);
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

Check kernel_check() {
  utsname u{};
  ::uname(&u);
  Check c{"kernel", State::ok, std::string(u.sysname) + " " + u.release + " (" + u.machine + ")",
          "", false};
  int major = 0, minor = 0;
  std::sscanf(u.release, "%d.%d", &major, &minor);
  if (major < 5 || (major == 5 && minor < 15)) {
    c.state = State::missing;
    c.fix = "gcr needs Linux 5.15 or later (CRIU 4.x, pidfd_getfd, CAP_CHECKPOINT_RESTORE)";
    c.required = true;
  }
  return c;
}

// CRIU's version: gcr needs 4.x.
Check criu_version_check(const criu::Tools& tools) {
  Check c{"CRIU", State::ok, "", "", true};
  auto [rc, version] = run_capture(shell_quote(tools.criu.string()) + " --version");
  std::string v = version.substr(0, version.find('\n'));
  if (v.rfind("Version: ", 0) == 0) v = v.substr(9);
  int major = 0;
  std::sscanf(v.c_str(), "%d", &major);
  c.detail = v + " at " + tools.criu.string();
  if (rc != 0 || major < 4) {
    c.state = State::missing;
    c.fix =
        "gcr needs CRIU 4.x (Debian 12's 3.17 fails on current kernels); scripts/setup.sh "
        "builds 4.2";
  }
  return c;
}

// Note [CRIU's capabilities probed] (gcr/criu_capabilities.h): one line per capability gcr
// takes from a patch of its own, with what its absence costs.
std::vector<Check> capability_checks(const criu::Tools& tools) {
  std::vector<Check> out;
  for (std::size_t i = 0; i < criu::kCapabilities; ++i) {
    auto cap = static_cast<criu::Capability>(i);
    const criu::CapabilityState& s = tools.can->state(cap);
    Check c{std::string("CRIU ") + criu::info(cap).name, State::ok, "", "", false};
    c.detail = (s.present ? std::string(criu::info(cap).does) + " (" + s.seen + ")" : s.seen);
    if (!s.present) {
      c.state = State::warn;
      c.fix = std::string(criu::info(cap).without) + "; gcr's CRIU has it (" +
              criu::info(cap).patch + ", scripts/setup.sh builds it)";
    }
    out.push_back(std::move(c));
  }
  return out;
}

// `criu check` (root only).
Check run_criu_check(const criu::Tools& tools) {
  auto [crc, text] = run_capture(shell_quote(tools.criu.string()) + " check");
  Check k{"criu check", State::ok, last_line(text), "", true};
  if (crc != 0) {
    k.state = State::missing;
    k.fix = "CRIU cannot work on this kernel as it is; its message above says what is missing";
  }
  return k;
}

// Note [CRIU's kernel probe cached] (libgcr/criu/criu_run.cpp)
Check kdat_check(const criu::Tools& tools) {
  Check kdat{"CRIU kernel probe", State::ok, "", "", false};
  struct statfs run_fs {};
  if (!criu::kdat_cache_dir().empty() && tools.can->has(criu::Capability::kdat_cache_dir)) {
    kdat.detail = "cached in " + criu::kdat_cache_dir() + " (every CRIU start skips it)";
  } else if (::statfs("/run", &run_fs) == 0 && run_fs.f_type == TMPFS_MAGIC) {
    kdat.detail = "cached by CRIU in /run (a tmpfs)";
  } else {
    kdat.state = State::warn;
    kdat.detail = "not cached: every CRIU start probes the kernel again (40-60 ms on each restore)";
    kdat.fix = criu::kdat_cache_dir().empty()
                   ? "/dev/shm/gcr-criu-" + std::to_string(geteuid()) +
                         " must be a directory only this user can write on a mounted /dev/shm (a "
                         "tmpfs); remove one another user made"
                   : "this CRIU lacks kdat-cache-dir: mount a tmpfs on /run, or use gcr's CRIU";
  }
  return kdat;
}

Check permissions_check(const criu::Tools& tools) {
  Check perm{"permissions", State::ok, "", "", true};
  if (geteuid() == 0) {
    perm.detail = "root: gcrd runs CRIU with every capability";
  } else if (Status s = criu::check_unprivileged_criu(tools.criu); s) {
    perm.detail = "uid " + std::to_string(geteuid()) +
                  ": CRIU carries CAP_CHECKPOINT_RESTORE and CAP_SYS_PTRACE (--unprivileged)";
  } else {
    perm.state = State::missing;
    perm.detail = "uid " + std::to_string(geteuid());
    perm.fix = s.error().message;
  }
  return perm;
}

std::vector<Check> criu_checks() {
  std::vector<Check> out;
  auto tools = criu::find_tools(self_dir());
  if (!tools) {
    // find_tools fails on the plugin too: tell the two apart.
    Check c{"CRIU", State::missing, tools.error().message,
            "run scripts/setup.sh (it builds CRIU 4.2 with gcr's patches), or set GCR_CRIU", true};
    out.push_back(c);
    return out;
  }
  out.push_back(criu_version_check(*tools));
  for (Check& c : capability_checks(*tools)) out.push_back(std::move(c));
  out.push_back(
      {"CRIU plugin", State::ok, tools->plugin_dir.string() + "/gcr_criu_plugin.so", "", true});
  if (geteuid() == 0) out.push_back(run_criu_check(*tools));
  out.push_back(kdat_check(*tools));
  out.push_back(permissions_check(*tools));
  return out;
}

Check unshare_check() {
  for (const char* p : {"/usr/bin/unshare", "/bin/unshare", "/usr/sbin/unshare"})
    if (::access(p, X_OK) == 0) return {"unshare", State::ok, p, "", true};
  return {"unshare", State::missing, "unshare(1) not found",
          "install util-linux: a restore whose pid is taken goes into a pid namespace of its own "
          "with it",
          true};
}

Check driver_check() {
  bool simulated = false;
  auto driver = real_driver_path(&simulated);
  if (!driver)
    return {"GPU driver", State::missing, driver.error().message,
            "install the NVIDIA driver, or build gcr (simgpu, the simulated GPU, comes with it)",
            true};
  Check c{"GPU driver", State::ok, "", "", true};
  void* h = ::dlopen(driver->c_str(), RTLD_NOW | RTLD_LOCAL);
  bool checkpoint_api = h && ::dlsym(h, "cuCheckpointProcessLock");
  if (h) ::dlclose(h);
  c.detail = (simulated ? "simgpu, the simulated GPU (no NVIDIA driver found): " : "") +
             driver->string() +
             (checkpoint_api ? "; its checkpoint API (cuCheckpointProcess*) is there"
                             : "; no checkpoint API (cuCheckpointProcess*)");
  if (!checkpoint_api) {
    c.state = State::missing;
    c.fix = "gcr needs a driver with the CUDA checkpoint API: NVIDIA driver 570 or later";
  }
  return c;
}

// Note [Device pages] (tools/simgpu/memory.cpp): simgpu's device memory is shared memory, in
// 2 MiB pages only where the host's transparent huge pages allow it for shared memory. None:
// not on simgpu (a GPU maps its memory in 2 MiB pages whatever the host says).
std::optional<Check> device_pages_check() {
  bool simulated = false;
  if (!real_driver_path(&simulated) || !simulated) return std::nullopt;
  const char* path = "/sys/kernel/mm/transparent_hugepage/shmem_enabled";
  std::ifstream in(path);
  std::string text, setting;
  std::getline(in, text);
  if (auto open = text.find('['), close = text.find(']');
      open != std::string::npos && close != std::string::npos && close > open)
    setting = text.substr(open + 1, close - open - 1);
  Check c{"simgpu device pages", State::ok, "", "", false};
  if (setting == "within_size" || setting == "always" || setting == "force") {
    c.detail = "2 MiB, as on a GPU (" + std::string(path) + ": " + setting + ")";
  } else {
    c.state = State::warn;
    c.detail =
        "4 KiB (" + std::string(path) + ": " + (setting.empty() ? "unreadable" : setting) + ")";
    c.fix = "echo within_size > " + std::string(path) +
            " (root): with 4 KiB pages a live checkpoint's park grows with the footprint "
            "(15-20 ms per GiB here), where a GPU's 2 MiB pages make it flat";
  }
  return c;
}

Check io_uring_check() {
  io_uring_params p{};
  long fd = ::syscall(__NR_io_uring_setup, 4, &p);
  if (fd >= 0) {
    ::close(static_cast<int>(fd));
    return {"io_uring", State::ok, "available", "", false};
  }
  int err = errno;
  return {"io_uring", State::warn, std::string("io_uring_setup: ") + std::strerror(err),
          "gcr stores and loads with plain reads and writes instead (slower on fast disks); "
          "allow io_uring (sysctl kernel.io_uring_disabled=0) for its queue",
          false};
}

Check userfaultfd_check() {
  long fd = ::syscall(__NR_userfaultfd, O_CLOEXEC | O_NONBLOCK);
  if (fd >= 0) {
    ::close(static_cast<int>(fd));
    return {"userfaultfd", State::ok, "available", "", false};
  }
  int err = errno;
  return {"userfaultfd", State::warn, std::string("userfaultfd: ") + std::strerror(err),
          "CRIU's lazy restore of host memory (criu --lazy-pages) needs it; as root, or sysctl "
          "vm.unprivileged_userfaultfd=1",
          false};
}

// Write protection (userfaultfd): gcr's CRIU writes host memory after the process runs again and
// tracks it between checkpoints with it (--cow-dump, --cow-track), pinned memory included (Note
// [Device writes to pinned host memory] in interpose/pinned.h, which needs MADV_POPULATE_WRITE).
Check write_protect_check() {
  Check c{"write protection", State::ok, "", "", false};
  long fd = ::syscall(__NR_userfaultfd, O_CLOEXEC | O_NONBLOCK);
  bool wp = false;
  if (fd >= 0) {
    uffdio_api api{};
    api.api = UFFD_API;
    api.features = UFFD_FEATURE_PAGEFAULT_FLAG_WP;
    wp = ::ioctl(static_cast<int>(fd), UFFDIO_API, &api) == 0;
    ::close(static_cast<int>(fd));
  }
  long page = ::sysconf(_SC_PAGESIZE);
  void* m = ::mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  bool populate = m != MAP_FAILED && ::madvise(m, page, MADV_POPULATE_WRITE) == 0;
  if (m != MAP_FAILED) ::munmap(m, page);
  if (wp && populate) {
    c.detail =
        "userfaultfd write protection and MADV_POPULATE_WRITE: host memory, pinned memory "
        "included, is written after the resume and tracked between checkpoints";
  } else {
    c.state = State::warn;
    c.detail = !wp ? "no userfaultfd write protection" : "no MADV_POPULATE_WRITE (Linux < 5.14)";
    c.fix =
        "live checkpoints copy host memory while the process is frozen, every time; Linux 6.13 "
        "or later with userfaultfd lets gcr's CRIU write it after the resume and track it";
  }
  return c;
}

// Soft-dirty bits: CRIU's own incremental dumps (--track-mem) track writes with them, which gcrd
// uses where its CRIU lacks cow-track (Note [Incremental dumps made whole] in gcr/criu_pagemap.h).
Check soft_dirty_check() {
  if (criu::kernel_tracks_soft_dirty())
    return {"soft-dirty", State::ok,
            "the kernel tracks writes to host memory (a CRIU without cow-track dumps only what "
            "changed, with --track-mem)",
            "", false};
  return {"soft-dirty", State::warn, "writes are not marked (no CONFIG_MEM_SOFT_DIRTY)",
          "CRIU's own incremental dumps (--track-mem) need it; gcr tracks host memory with "
          "userfaultfd write protection instead (see 'write protection'), which needs gcr's CRIU",
          false};
}

Check bpf_check() {
  Check c{"eBPF tracing", State::ok, "", "", false};
  if (!trace::kernel_tracing_built()) {
    c.state = State::warn;
    c.detail = "this gcr was built without eBPF (libbpf, bpftool, clang)";
    c.fix =
        "gcr checkpoint --trace records gcrd's phases only; install libbpf-dev, bpftool and "
        "clang (scripts/setup.sh) and rebuild";
    return c;
  }
  if (::access("/sys/kernel/btf/vmlinux", R_OK) != 0) {
    c.state = State::warn;
    c.detail = "the kernel has no BTF (/sys/kernel/btf/vmlinux)";
    c.fix = "gcr checkpoint --trace needs a kernel built with CONFIG_DEBUG_INFO_BTF";
    return c;
  }
  auto tracer = trace::KernelTracer::start(getpid());
  if (!tracer) {
    c.state = State::warn;
    c.detail = tracer.error().message;
    c.fix =
        "gcr checkpoint --trace records gcrd's phases only; run it as root (or with CAP_BPF "
        "and CAP_PERFMON) for the kernel's timeline";
    return c;
  }
  (void)(*tracer)->stop();
  c.detail = "eBPF programs load and attach (gcr checkpoint --trace)";
  return c;
}

Check gcrd_check() {
  fs::path socket = gcrd::default_socket_path();
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket.c_str());
  bool up = fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  if (fd >= 0) ::close(fd);
  if (up) return {"gcrd", State::ok, "running, listening on " + socket.string(), "", false};
  return {"gcrd", State::ok,
          "not running (gcr starts it on demand; its socket will be " + socket.string() + ")", "",
          false};
}

Check store_check(Context& ctx) {
  Check c{"image store", State::ok, "", "", true};
  auto location = ctx.store_location();
  if (!location) {
    c.state = State::missing;
    c.detail = location.error().message;
    c.fix = "set --store or GCR_STORE to a directory or an s3:// bucket";
    return c;
  }
  if (location->is_s3()) {
    c.detail = location->text() + " (a bucket: `gcr image ls` checks that it answers)";
    return c;
  }
  // The store, or the directory it would be created in. exists() is false where it cannot tell
  // (a directory this user may not search), and ::access says why below.
  std::error_code ec;
  const bool created = fs::exists(location->directory, ec);
  fs::path dir = location->directory;
  while (!dir.empty() && !fs::exists(dir, ec) && dir != dir.parent_path()) dir = dir.parent_path();
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) {
    c.state = State::missing;
    c.detail = location->text() + ": " + std::strerror(errno);
    c.fix = "make the store's directory reachable, or choose another with --store";
    return c;
  }
  std::uint64_t free_bytes = static_cast<std::uint64_t>(st.f_bavail) * st.f_frsize;
  bool writable = ::access(dir.c_str(), W_OK) == 0;
  c.detail = location->text() + (created ? "" : " (not created yet)") + ", " +
             format_bytes(free_bytes) + " free";
  if (!writable) {
    c.state = State::missing;
    c.fix = "uid " + std::to_string(geteuid()) + " cannot write " + dir.string() +
            "; choose a store of yours with --store or GCR_STORE";
  } else if (free_bytes < (1ull << 30)) {
    c.state = State::warn;
    c.fix =
        "under 1 GiB free: checkpoints of any size will fail with 'no space'; free space or "
        "run `gcr image gc`";
  }
  return c;
}

Status doctor(bool json, Context& ctx) {
  std::vector<Check> checks;
  checks.push_back(kernel_check());
  for (Check& c : criu_checks()) checks.push_back(std::move(c));
  checks.push_back(unshare_check());
  checks.push_back(driver_check());
  if (auto pages = device_pages_check()) checks.push_back(std::move(*pages));
  checks.push_back(store_check(ctx));
  checks.push_back(gcrd_check());
  checks.push_back(io_uring_check());
  checks.push_back(userfaultfd_check());
  checks.push_back(write_protect_check());
  checks.push_back(soft_dirty_check());
  checks.push_back(bpf_check());
  std::size_t blocking = 0, warnings = 0;
  for (const Check& c : checks) {
    if (c.state != State::ok && c.required) ++blocking;
    if (c.state != State::ok && !c.required) ++warnings;
  }
  if (json) {
    JsonWriter j;
    j.begin_object().field("ready", blocking == 0).key("checks").begin_array();
    for (const Check& c : checks) {
      j.begin_object()
          .field("name", c.name)
          .field("state", state_name(c.state))
          .field("required", c.required)
          .field("detail", c.detail);
      if (!c.fix.empty()) j.field("fix", c.fix);
      j.end_object();
    }
    j.end_array().end_object();
    print(j.take());
  } else {
    std::string out;
    int width = 14;
    for (const Check& c : checks) width = std::max(width, static_cast<int>(c.name.size()));
    for (const Check& c : checks) {
      char head[96];
      std::snprintf(head, sizeof head, "%-8s %-*s ", state_name(c.state), width, c.name.c_str());
      out += head + display_safe(c.detail) + "\n";
      if (!c.fix.empty()) out += std::string(10 + width, ' ') + "fix: " + c.fix + "\n";
    }
    out += blocking ? std::to_string(blocking) +
                          " required part(s) missing: gcr cannot checkpoint or restore here yet\n"
                    : "gcr can checkpoint and restore here" +
                          (warnings ? "; " + std::to_string(warnings) +
                                          " optional part(s) missing (see warn)\n"
                                    : std::string("\n"));
    print(out);
  }
  if (blocking)
    return Error{Errc::unsupported, std::to_string(blocking) + " required part(s) missing"};
  return ok();
}

// `gcr doctor --capability NAME`: whether gcr's CRIU here has one capability (exit 0) or not
// (8), for scripts and tests that need it.
Status capability_answer(const std::string& name, bool json) {
  criu::Capability cap;
  if (!criu::capability_named(name, &cap)) {
    std::string names;
    for (std::size_t i = 0; i < criu::kCapabilities; ++i)
      names += std::string(i ? ", " : "") + criu::info(static_cast<criu::Capability>(i)).name;
    return Error{Errc::invalid_argument, "no CRIU capability is called '" + name + "': " + names};
  }
  GCR_TRY_ASSIGN(criu::Tools tools, criu::find_tools(self_dir()));
  const criu::CapabilityState& s = tools.can->state(cap);
  if (json) {
    JsonWriter j;
    j.begin_object()
        .field("capability", name)
        .field("present", s.present)
        .field("probed", s.probed)
        .field("seen", s.seen)
        .field("criu", tools.criu.string())
        .end_object();
    print(j.take());
  } else {
    print(name + ": " + (s.present ? "present" : "absent") + " (" + s.seen + ")\n");
  }
  if (!s.present)
    return Error{Errc::unsupported,
                 tools.criu.string() + " lacks " + name + ": " + criu::info(cap).without};
  return ok();
}

}  // namespace

void register_doctor_command(CLI::App& app, Context& ctx) {
  static bool json = false;
  static std::string capability;
  auto* d = app.add_subcommand(
      "doctor",
      "What this machine supports and what is missing for gcr (CRIU and each capability gcr "
      "takes from its CRIU patches, probed, with what its absence costs; the GPU driver and its "
      "checkpoint API, permissions, the store, io_uring, userfaultfd, write protection, "
      "soft-dirty, eBPF), each "
      "with its fix; exit 0 when gcr can checkpoint and restore here, 8 when a required part is "
      "missing");
  d->add_flag("--json", json, "Machine-readable output");
  d->add_option(
      "--capability", capability,
      "Only whether this CRIU has one capability of gcr's patches (terminal-onto-any-file, "
      "cow-dump, ...: the names `gcr doctor` lists after 'CRIU'); exit 0 if it has, 8 if "
      "not");
  on_run(d, ctx, [&ctx] {
    return capability.empty() ? doctor(json, ctx) : capability_answer(capability, json);
  });
}

}  // namespace gcr::cli
