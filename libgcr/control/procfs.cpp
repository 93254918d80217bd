// Finding gcr-control mailboxes through /proc/<pid>/fd, for Client::connect and `gcr ps`
// (procfs.h).
#include "procfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "gcr/control.h"
#include "mailbox.h"

namespace gcr::control {
namespace {

struct DirCloser {
  void operator()(DIR* d) const noexcept { closedir(d); }
};
using Dir = std::unique_ptr<DIR, DirCloser>;

// "/memfd:gcr-control (deleted)" is how the kernel shows our memfd; an exact name, nothing longer.
bool is_mailbox_link(std::string_view target) {
  constexpr std::string_view kLink = "/memfd:gcr-control";  // "/memfd:" + kMailboxName
  if (target.substr(0, kLink.size()) != kLink) return false;
  std::string_view rest = target.substr(kLink.size());
  return rest.empty() || rest == " (deleted)";
}

bool denied(int err) {
  return err == EACCES || err == EPERM;
}

Error absent_error(pid_t pid) {
  return make_error(Errc::not_found, "no process with pid " + std::to_string(pid));
}

Error exited_error(pid_t pid) {
  return make_error(Errc::not_found, "process " + std::to_string(pid) + " has exited");
}

// The fd entry of pid's mailbox ("/proc/<pid>/fd/N"), or why not.
Result<std::string> find_mailbox_link(pid_t pid) {
  std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  Dir d(opendir(dir.c_str()));
  if (!d) {
    if (denied(errno)) return permission_error(pid);
    if (errno == ENOENT) return absent_error(pid);
    return errno_error("opendir " + dir);
  }
  while (dirent* e = readdir(d.get())) {
    if (e->d_name[0] == '.') continue;
    std::string link = dir + "/" + e->d_name;
    char target[64];
    ssize_t n = readlink(link.c_str(), target, sizeof target);
    if (n < 0 && denied(errno)) return permission_error(pid);
    if (n <= 0 || static_cast<std::size_t>(n) >= sizeof target) continue;
    if (is_mailbox_link(std::string_view(target, static_cast<std::size_t>(n)))) return link;
  }
  return make_error(
      Errc::not_found,
      "process " + std::to_string(pid) +
          " is not running under gcr (no gcr-control mailbox); start it with 'gcr run' "
          "(a process gets its mailbox at its first CUDA call)");
}

}  // namespace

Error permission_error(pid_t pid) {
  return make_error(
      Errc::permission_denied,
      "permission denied: only root or the process owner may control pid " + std::to_string(pid));
}

ProcessLife process_life(pid_t pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return errno == ENOENT || errno == ESRCH ? ProcessLife::absent : ProcessLife::alive;
  char buf[512];
  ssize_t n = read(fd.get(), buf, sizeof buf - 1);
  if (n <= 0) return ProcessLife::absent;  // reading a reaped process's stat fails with ESRCH
  buf[n] = 0;
  const char* close_paren = std::strrchr(buf, ')');  // comm may contain anything, even ')'
  if (!close_paren || close_paren[1] != ' ') return ProcessLife::alive;
  switch (close_paren[2]) {
    case 'Z':
    case 'X':
    case 'x':
      return ProcessLife::exited;
    case 'T':
    case 't':
      return ProcessLife::stopped;
    default:
      return ProcessLife::alive;
  }
}

Result<UniqueFd> open_mailbox(pid_t pid) {
  if (pid <= 0) return make_error(Errc::invalid_argument, "invalid pid " + std::to_string(pid));
  switch (process_life(pid)) {
    case ProcessLife::absent:
      return absent_error(pid);
    case ProcessLife::exited:
      return exited_error(pid);
    default:
      break;
  }
  GCR_TRY_ASSIGN(std::string link, find_mailbox_link(pid));
  UniqueFd fd(open(link.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd) {
    if (denied(errno)) return permission_error(pid);
    if (errno == ENOENT) {  // closed or exited meanwhile
      if (process_life(pid) != ProcessLife::alive) return exited_error(pid);
      return make_error(Errc::not_found, "process " + std::to_string(pid) +
                                             " closed its gcr-control mailbox (did it fork and "
                                             "exec?); try again");
    }
    return errno_error("open " + link);
  }
  return fd;
}

namespace {
// gcrd and gcr-keeper hold other processes' mailboxes (a checkpoint's session locks, a keeper's
// charge) without being managed themselves.
bool is_gcr_daemon(pid_t pid) {
  char path[48];
  std::snprintf(path, sizeof path, "/proc/%d/comm", static_cast<int>(pid));
  UniqueFd fd(open(path, O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  char comm[32] = {};
  ssize_t n = read(fd.get(), comm, sizeof comm - 1);
  if (n <= 0) return false;
  std::string_view name(comm, static_cast<std::size_t>(n));
  if (name.ends_with('\n')) name.remove_suffix(1);
  return name == "gcrd" || name == "gcr-keeper";
}
}  // namespace

std::vector<pid_t> find_managed_processes() {
  std::vector<pid_t> out;
  Dir proc(opendir("/proc"));
  if (!proc) return out;
  while (dirent* e = readdir(proc.get())) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != 0) continue;
    if (find_mailbox_link(static_cast<pid_t>(pid)) && !is_gcr_daemon(static_cast<pid_t>(pid)))
      out.push_back(static_cast<pid_t>(pid));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace gcr::control
