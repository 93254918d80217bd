// What a gcrd that is not root needs before it runs CRIU with --unprivileged: the kernel's
// CAP_CHECKPOINT_RESTORE (Linux 5.9) and CRIU's binary carrying it, with CAP_SYS_PTRACE, as file
// capabilities. Checked up front so that the user reads what to do instead of a CRIU log.
#include <linux/capability.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <fstream>

#include "gcr/criu.h"

namespace gcr::criu {
namespace {

constexpr int kCheckpointRestore = 40;  // CAP_CHECKPOINT_RESTORE; older headers lack the name
constexpr int kSysPtrace = 19;          // CAP_SYS_PTRACE

bool permitted(const vfs_ns_cap_data& caps, int cap) {
  return (caps.data[cap / 32].permitted >> (cap % 32)) & 1u;
}

}  // namespace

Status check_unprivileged_criu(const std::filesystem::path& criu) {
  if (geteuid() == 0) return ok();
  int last_cap = 0;
  std::ifstream("/proc/sys/kernel/cap_last_cap") >> last_cap;
  if (last_cap < kCheckpointRestore)
    return Error{Errc::unsupported,
                 "gcrd runs as uid " + std::to_string(geteuid()) +
                     ", and this kernel has no CAP_CHECKPOINT_RESTORE (Linux 5.9 added it): a user "
                     "who is not root cannot run CRIU here; use root's gcrd"};
  vfs_ns_cap_data caps{};
  ssize_t n = getxattr(criu.c_str(), "security.capability", &caps, sizeof caps);
  bool has = n >= static_cast<ssize_t>(XATTR_CAPS_SZ_2) &&
             (caps.magic_etc & VFS_CAP_REVISION_MASK) >= VFS_CAP_REVISION_2 &&
             permitted(caps, kCheckpointRestore) && permitted(caps, kSysPtrace);
  if (!has)
    return Error{Errc::permission_denied,
                 "gcrd runs as uid " + std::to_string(geteuid()) + " and CRIU (" + criu.string() +
                     ") lacks the file capabilities a user's CRIU needs (--unprivileged); as "
                     "root: setcap cap_checkpoint_restore,cap_sys_ptrace+eip " +
                     criu.string() + " (or use root's gcrd)"};
  return ok();
}

}  // namespace gcr::criu
