#include "work_dir.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include <cuda.h>

#include "gcr/chunk_id.h"

namespace gcr::gcrd {
namespace fs = std::filesystem;

namespace {

bool keep_work() {
  const char* keep = std::getenv("GCR_KEEP_WORK");
  return keep && *keep == '1';
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

}  // namespace

Result<WorkDir> WorkDir::create(const std::string& purpose) {
  fs::path root;
  if (const char* w = std::getenv("GCR_WORK_DIR"); w && *w)
    root = w;
  else
    root = "/var/tmp/gcr-" + std::to_string(geteuid());
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return errno_error("creating work directory " + root.string(), ec.value());
  fs::permissions(root, fs::perms::owner_all, ec);
  if (!keep_work()) remove_abandoned(root);
  // Made under a name remove_abandoned() skips, locked, then renamed: never unlocked under its
  // final name while in use.
  std::string name = purpose + "-" + store::Id128::random().hex().substr(0, 12);
  fs::path making = root / ("." + name + ".new");
  fs::create_directory(making, ec);
  if (ec) return errno_error("creating " + making.string(), ec.value());
  fs::permissions(making, fs::perms::owner_all, ec);
  WorkDir w;
  w.lock_ = UniqueFd(::open(making.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!w.lock_ || ::flock(w.lock_.get(), LOCK_EX) != 0) {
    Error e = errno_error("locking " + making.string());
    fs::remove(making, ec);
    return e;
  }
  w.path_ = root / name;
  if (::rename(making.c_str(), w.path_.c_str()) != 0) {
    Error e = errno_error("renaming " + making.string() + " to " + w.path_.string());
    fs::remove(making, ec);
    w.path_.clear();
    return e;
  }
  return w;
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
  else if (const char* r = std::getenv("GCR_REAL_LIBCUDA"))
    env["GCR_REAL_LIBCUDA"] = r;
  return env;
}

}  // namespace gcr::gcrd
