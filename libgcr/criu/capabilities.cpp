// What gcr takes from each of its CRIU patches, and the answers of the probes kept per binary
// (Note [CRIU's capabilities probed] in gcr/criu_capabilities.h).
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "gcr/criu_capabilities.h"

namespace gcr::criu {
namespace fs = std::filesystem;

namespace {

constexpr std::array<CapabilityInfo, kCapabilities> kInfo = {{
    {"terminal-onto-any-file", "0001-ext-tty-shell-job-inherit.patch",
     "a program started from a terminal is restored with the terminal inherited as any file",
     "a checkpoint of a program that has a terminal open is refused before anything stops: "
     "start it with its input and output redirected"},
    {"session-outside-pidns", "0002-session-outside-pid-namespace.patch",
     "a process whose session leader is outside its pid namespace is dumped as a shell job",
     "a checkpoint of a process started in a pid namespace without a session of its own "
     "(unshare --pid --fork, a CI runner) fails in CRIU's dump; the process runs on"},
    {"unprivileged-bounding-set", "0003-unprivileged-bounding-set.patch",
     "an --unprivileged restore in a container whose bounding set lacks a capability",
     "a restore by a gcrd that is not root, in such a container, fails in CRIU's restorer"},
    {"shell-job-group", "0004-shell-job-group-inside-namespace.patch",
     "a shell job whose group, not session, lies inside the dump's pid namespace is restored",
     "such a restore fails in CRIU (\"Current gid 0 intersects with pid\")"},
    {"cow-dump", "0005-cow-dump.patch",
     "a live checkpoint writes host memory after the process runs again",
     "host memory is written inside the freeze: a live checkpoint stalls ~0.4-0.5 s longer per "
     "GiB of host memory"},
    {"cow-track", "0006-cow-track.patch",
     "host memory not written since the previous checkpoint is taken from it",
     "every live checkpoint copies all host memory in the freeze, unless the kernel keeps "
     "soft-dirty bits (then CRIU's own --track-mem dumps only what changed)"},
    {"cow-dma", "0007-cow-dma.patch",
     "host memory a device may write by DMA is copied in the freeze, the rest after",
     "pinned host memory is kept those of the cut by the interposer writing each page before a "
     "device may; where GCR_PINNED_FROZEN=1 declines that, all host memory is written inside the "
     "freeze"},
    {"lazy-pages-pipelined", "0008-lazy-pages-remote-wait.patch",
     "an on-demand restore asks gcrd for several pieces of host memory at once, without spinning",
     "an on-demand restore brings host memory in one request at a time (slower loads)"},
    {"kdat-cache-dir", "0010-kdat-cache-dir.patch",
     "CRIU keeps its kernel probe in gcr's directory on /dev/shm",
     "where /run is not a tmpfs every CRIU start probes the kernel again: 40-60 ms more on each "
     "checkpoint and restore"},
}};

// The binary and kernel the answers hold for: a rebuilt CRIU or another kernel probes again.
std::string identity_of(const fs::path& criu) {
  struct stat st {};
  utsname u{};
  ::uname(&u);
  char b[256];
  if (::stat(criu.c_str(), &st) != 0) return {};
  std::snprintf(
      b, sizeof b, "%llx:%llx:%llx:%lld.%09ld:%s %s:%u", static_cast<unsigned long long>(st.st_dev),
      static_cast<unsigned long long>(st.st_ino), static_cast<unsigned long long>(st.st_size),
      static_cast<long long>(st.st_mtim.tv_sec), st.st_mtim.tv_nsec, u.release, u.version,
      static_cast<unsigned>(::geteuid()));
  return criu.string() + "\n" + b;
}

// Raised whenever what a probe concludes changes, so that answers of an older gcr are probed again.
constexpr const char* kCacheHeader = "gcr-criu-capabilities 2";

fs::path cache_file(const std::string& identity) {
  if (kdat_cache_dir().empty() || identity.empty()) return {};
  char name[64];
  std::snprintf(name, sizeof name, "capabilities-%016zx", std::hash<std::string>{}(identity));
  return fs::path(kdat_cache_dir()) / name;
}

// The kept answers: the header, the identity's two lines, then "NAME 1|0 1|0 SEEN" per capability.
std::optional<Capabilities> read_cache(const fs::path& file, const std::string& identity) {
  std::ifstream in(file);
  std::string header, path, id;
  if (!std::getline(in, header) || header != kCacheHeader || !std::getline(in, path) ||
      !std::getline(in, id) || path + "\n" + id != identity)
    return std::nullopt;
  Capabilities caps;
  std::size_t n = 0;
  for (std::string name; in >> name;) {
    Capability c;
    int present = 0, probed = 0;
    if (!capability_named(name, &c) || !(in >> present >> probed)) return std::nullopt;
    CapabilityState& s = caps.state(c);
    s.present = present == 1;
    s.probed = probed == 1;
    std::getline(in >> std::ws, s.seen);
    ++n;
  }
  if (n != kCapabilities) return std::nullopt;
  return caps;
}

void write_cache(const fs::path& file, const std::string& identity, const Capabilities& caps) {
  fs::path tmp = file.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    out << kCacheHeader << "\n" << identity << "\n";
    for (std::size_t i = 0; i < kCapabilities; ++i) {
      auto c = static_cast<Capability>(i);
      const CapabilityState& s = caps.state(c);
      out << info(c).name << ' ' << s.present << ' ' << s.probed << ' ' << s.seen << "\n";
    }
    if (!out) return;
  }
  std::error_code ec;
  fs::rename(tmp, file, ec);
  if (ec) fs::remove(tmp, ec);
}

// The answers kept for a CRIU binary that is no longer there (a test's wrapper, an old build
// tree) go: the directory holds one file per binary, and a reboot is its only other cleaner.
void remove_stale_answers(const fs::path& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().rfind("capabilities-", 0) != 0) continue;
    std::ifstream in(it->path());
    std::string header, path;
    if (std::getline(in, header) && std::getline(in, path) && !path.empty() &&
        !fs::exists(path, ec) && !ec) {
      in.close();
      fs::remove(it->path(), ec);
    }
    ec.clear();
  }
}

}  // namespace

const CapabilityInfo& info(Capability c) {
  return kInfo[static_cast<std::size_t>(c)];
}

bool capability_named(std::string_view name, Capability* out) {
  for (std::size_t i = 0; i < kCapabilities; ++i)
    if (name == kInfo[i].name) {
      *out = static_cast<Capability>(i);
      return true;
    }
  return false;
}

std::string Capabilities::lacking(Capability c, std::string_view consequence) {
  return std::string(consequence) + ": this CRIU lacks " + info(c).name + " (" + info(c).patch +
         "; gcr doctor lists what it lacks)";
}

Status dumpable_by(const ProcessTree& tree, const Capabilities& can) {
  const std::string process = "process " + std::to_string(tree.root);
  if (tree.has_outside_terminal() && !can.has(Capability::terminal_onto_any_file)) {
    std::string terminal;
    for (const OpenFile& f : tree.files)
      if (f.kind == FileKind::terminal && f.external && terminal.empty()) terminal = f.path;
    return Error{Errc::unsupported,
                 process + " has " + (terminal.empty() ? "a terminal" : terminal) +
                     " open, of a session outside it (it was started from an interactive "
                     "shell); a restore gives it the restoring user's output instead, which this "
                     "CRIU cannot do (it lacks terminal-onto-any-file, " +
                     info(Capability::terminal_onto_any_file).patch +
                     "): start the program with its input and output redirected (gcr run PROGRAM "
                     "</dev/null >LOG 2>&1), or use gcr's CRIU (scripts/setup.sh)"};
  }
  if (tree.session_outside_namespace && !can.has(Capability::session_outside_pidns))
    return Error{Errc::unsupported,
                 process +
                     "'s session leader is outside its pid namespace (it was started "
                     "under `unshare --pid --fork` or a runner that makes no session), "
                     "which this CRIU cannot dump (it lacks session-outside-pidns, " +
                     std::string(info(Capability::session_outside_pidns).patch) +
                     "): start it in a session of its own (setsid PROGRAM), or use gcr's CRIU "
                     "(scripts/setup.sh)"};
  return ok();
}

const Capabilities& capabilities_of(const fs::path& criu) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Capabilities>> known;
  std::string identity = identity_of(criu);
  std::lock_guard lock(mu);
  auto& slot = known[identity];
  if (slot) return *slot;
  fs::path file = cache_file(identity);
  if (auto cached = file.empty() ? std::nullopt : read_cache(file, identity)) {
    slot = std::make_unique<Capabilities>(*cached);
  } else {
    slot = std::make_unique<Capabilities>(probe_capabilities(criu));
    if (!file.empty()) {
      remove_stale_answers(file.parent_path());
      write_cache(file, identity, *slot);
    }
  }
  return *slot;
}

}  // namespace gcr::criu
