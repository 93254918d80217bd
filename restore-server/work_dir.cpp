#include "work_dir.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>

#include <cuda.h>

#include "gcr/chunk_id.h"

namespace gcr::gcrd {
namespace fs = std::filesystem;

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
  WorkDir w;
  w.path_ = root / (purpose + "-" + store::Id128::random().hex().substr(0, 12));
  fs::create_directory(w.path_, ec);
  if (ec) return errno_error("creating " + w.path_.string(), ec.value());
  fs::permissions(w.path_, fs::perms::owner_all, ec);
  return w;
}

WorkDir& WorkDir::operator=(WorkDir&& o) noexcept {
  if (this != &o) {
    path_ = std::move(o.path_);
    o.path_.clear();
  }
  return *this;
}

WorkDir::~WorkDir() {
  if (path_.empty()) return;
  if (const char* keep = std::getenv("GCR_KEEP_WORK"); keep && *keep == '1') return;
  std::error_code ec;
  fs::remove_all(path_, ec);
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
