#include "paths.h"

#include <unistd.h>

#include <cstdlib>

#include "gcr/multiarch.h"
#include "gcr/settings.h"
#include "gcr/trusted_path.h"

namespace gcr::cli {
namespace fs = std::filesystem;

namespace {
bool readable(const fs::path& p) {
  return access(p.c_str(), R_OK) == 0;
}

Result<fs::path> first_existing(std::initializer_list<fs::path> candidates, const std::string& what,
                                const std::string& hint) {
  for (const fs::path& p : candidates)
    if (readable(p)) return fs::weakly_canonical(p);
  return Error{Errc::not_found, what + " not found next to " + self_dir().string() + "; " + hint};
}
}  // namespace

fs::path self_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path(".") : exe.parent_path();
}

Result<fs::path> interposer_path() {
  if (auto p = path_for_root("GCR_INTERPOSER", settings().interposer)) return *p;
  fs::path d = self_dir();
  return first_existing({d / "../interpose/libcuda.so.1", d / "../lib/gcr/libcuda.so.1"},
                        "gcr's interposer", "build gcr (scripts/setup.sh) or set GCR_INTERPOSER");
}

Result<fs::path> real_driver_path(bool* simulated) {
  if (simulated) *simulated = false;
  if (auto p = path_for_root("GCR_REAL_LIBCUDA", settings().real_libcuda)) return *p;
  for (const char* p : {GCR_MULTIARCH_LIBDIR "/libcuda.so.1", "/usr/lib64/libcuda.so.1",
                        "/usr/local/nvidia/lib64/libcuda.so.1", "/usr/lib/wsl/lib/libcuda.so.1"})
    if (readable(p)) return fs::path(p);
  if (simulated) *simulated = true;
  fs::path d = self_dir();
  return first_existing({d / "../simgpu/libcuda.so.1", d / "../lib/gcr/simgpu/libcuda.so.1"},
                        "no NVIDIA driver, and simgpu",
                        "install the NVIDIA driver, build gcr, or set GCR_REAL_LIBCUDA");
}

Result<fs::path> gcrd_path() {
  if (auto p = path_for_root("GCR_GCRD", settings().gcrd)) return *p;
  fs::path d = self_dir();
  return first_existing({d / "gcrd", d / "../libexec/gcr/gcrd"}, "gcrd",
                        "build gcr, reinstall it, or set GCR_GCRD");
}

std::map<std::string, std::string> gcrd_environment(const fs::path& driver) {
  std::map<std::string, std::string> env;
  std::string path = driver.parent_path().string();
  if (const char* old = std::getenv("LD_LIBRARY_PATH"); old && *old) path += ":" + std::string(old);
  env["LD_LIBRARY_PATH"] = path;
  env["LD_PRELOAD"] = "";  // gcrd must never run under gcr's interposer
  env["GCR_REAL_LIBCUDA"] = driver.string();
  return env;
}

}  // namespace gcr::cli
