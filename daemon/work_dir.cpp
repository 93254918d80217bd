#include "work_dir.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include <cuda.h>

#include "gcr/chunk_id.h"
#include "gcr/private_dir.h"
#include "gcr/process_tree.h"
#include "gcr/settings.h"
#include "gcr/trusted_path.h"

namespace gcr::gcrd {
namespace fs = std::filesystem;

namespace {

bool keep_work() {
  return settings().test_hooks.keep_work;  // GCR_KEEP_WORK=1
}

// ckpt-<12 hex digits> or restore-<...>: a name create() gives (".ckpt-<hex>.new" is one being
// made). GCR_WORK_DIR may be a shared directory: nothing else is touched.
bool work_dir_name(const std::string& name) {
  auto dash = name.find('-');
  if (dash == std::string::npos || name.size() - dash - 1 != 12) return false;
  std::string purpose = name.substr(0, dash);
  if (purpose != "ckpt" && purpose != "restore") return false;
  return name.find_first_not_of("0123456789abcdef", dash + 1) == std::string::npos;
}

// Removes the work directories under root that nobody holds: their gcrd died (killed, crashed)
// before it could remove them. A directory whose lock is held is someone's, in use.
void remove_abandoned(const fs::path& root) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    std::string name = entry.path().filename().string();
    if (!work_dir_name(name) || !entry.is_directory(ec) || entry.is_symlink(ec)) continue;
    UniqueFd fd(::open(entry.path().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0 || st.st_uid != ::geteuid()) continue;
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;
    fs::remove_all(entry.path(), ec);
  }
}

// What /proc/meminfo says is available, in bytes (0 if unreadable).
std::uint64_t mem_available() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("MemAvailable:", 0) == 0) return std::stoull(line.substr(13)) * 1024;
  return 0;
}

// Note [Dumping into memory]: the memory root, if there is one to use.
std::optional<fs::path> memory_root() {
  return settings().memory_work_dir;  // GCR_MEMORY_WORK_DIR, not "off"
}

// Makes purpose-<hex> in root (a private directory, opened as root_fd), locked; see create().
Status create_in(const fs::path& root, const UniqueFd& root_fd, const std::string& purpose,
                 UniqueFd& lock, fs::path& path) {
  if (!keep_work()) remove_abandoned(root);
  // Made under a name remove_abandoned() skips, locked, then renamed: never unlocked under its
  // final name while in use. The root is private (Note [Private directories]): nobody else can
  // swap what is made in it.
  std::string name = purpose + "-" + store::Id128::random().hex().substr(0, 12);
  std::string making = "." + name + ".new";
  if (::mkdirat(root_fd.get(), making.c_str(), 0700) != 0)
    return errno_error("creating " + (root / making).string());
  lock = UniqueFd(
      ::openat(root_fd.get(), making.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!lock || ::flock(lock.get(), LOCK_EX) != 0) {
    Error e = errno_error("locking " + (root / making).string());
    ::unlinkat(root_fd.get(), making.c_str(), AT_REMOVEDIR);
    return e;
  }
  if (::renameat(root_fd.get(), making.c_str(), root_fd.get(), name.c_str()) != 0) {
    Error e = errno_error("renaming " + (root / making).string() + " to " + name);
    ::unlinkat(root_fd.get(), making.c_str(), AT_REMOVEDIR);
    return e;
  }
  path = root / name;
  return ok();
}

}  // namespace

std::uint64_t resident_bytes(const std::vector<pid_t>& pids) {
  std::uint64_t total = 0;
  for (pid_t pid : pids)
    if (auto rss = criu::process_status_field(pid, "VmRSS")) total += std::stoull(*rss) * 1024;
  return total;
}

fs::path work_root() {
  if (const auto& w = settings().work_dir) return *w;
  if (geteuid() == 0) return "/var/lib/gcr/work";
  if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x) return fs::path(x) / "gcr/work";
  return "/var/tmp/gcr-" + std::to_string(geteuid());
}

Result<UniqueFd> open_work_root() {
  fs::path root = work_root();
  auto fd = io::open_private_dir(root, true);
  if (!fd) return std::move(fd).context("gcrd's work directory");
  return fd;
}

Result<WorkDir> WorkDir::create(const std::string& purpose) {
  fs::path root = work_root();
  GCR_TRY_ASSIGN(UniqueFd root_fd, open_work_root());
  WorkDir w;
  GCR_TRY(create_in(root, root_fd, purpose, w.lock_, w.path_));
  return w;
}

Result<WorkDir> WorkDir::create_for_dump(std::uint64_t memory_bytes, bool* in_memory) {
  *in_memory = false;
  if (auto root = memory_root()) {
    constexpr std::uint64_t kSpare = 256ull << 20;
    struct statvfs sv {};
    fs::path probe = fs::exists(*root) ? *root : root->parent_path();
    bool fits = ::statvfs(probe.c_str(), &sv) == 0 &&
                static_cast<std::uint64_t>(sv.f_bavail) * sv.f_frsize >= memory_bytes + kSpare &&
                mem_available() >= memory_bytes + memory_bytes / 4 + kSpare;
    if (fits) {
      auto root_fd = io::open_private_dir(*root, true);
      WorkDir w;
      if (root_fd && create_in(*root, *root_fd, "ckpt", w.lock_, w.path_)) {
        *in_memory = true;
        return w;
      }
    }
  }
  return create("ckpt");
}

WorkDir& WorkDir::operator=(WorkDir&& o) noexcept {
  if (this != &o) {
    path_ = std::move(o.path_);
    lock_ = std::move(o.lock_);
    o.path_.clear();
  }
  return *this;
}

WorkDir::~WorkDir() {
  if (path_.empty() || keep_work()) return;
  std::error_code ec;
  fs::remove_all(path_, ec);  // then lock_ closes
}

std::map<std::string, std::string> driver_env() {
  std::map<std::string, std::string> env;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cuInit), &info) && info.dli_fname && info.dli_fname[0] == '/')
    env["GCR_REAL_LIBCUDA"] = info.dli_fname;
  else if (auto r = path_for_root("GCR_REAL_LIBCUDA", settings().real_libcuda))
    env["GCR_REAL_LIBCUDA"] = r->string();
  // gcrd runs this CRIU itself: its plugin must not turn back to gcrd (Note [CRIU run by someone
  // else] in checkpoint.h), whatever gcr.conf says.
  env["GCR_PLUGIN_GCRD"] = "off";
  return env;
}

}  // namespace gcr::gcrd
