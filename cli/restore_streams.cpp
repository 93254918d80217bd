#include "restore_streams.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <vector>

namespace gcr::cli {
namespace {

using criu::FileKind;
using criu::OpenFile;

const char* stream_name(int fd) {
  return fd == 0 ? "stdin" : fd == 1 ? "stdout" : "stderr";
}

struct Connection {
  OpenFile first;         // the first task and fd that held it
  std::set<int> stdio;    // the root's fds 0-2 that are this connection
  bool writable = false;  // some holder may write to it
  bool append = false;
};

Result<UniqueFd> open_file(const std::string& path, int flags, const std::string& why) {
  UniqueFd fd(::open(path.c_str(), flags | O_CLOEXEC | O_NOCTTY, 0644));
  if (!fd) return errno_error("cannot open " + path + " (" + why + ")");
  return fd;
}

Result<UniqueFd> open_for_stream(int stream, const std::string& path) {
  return open_file(path, stream == 0 ? O_RDONLY : O_WRONLY | O_CREAT | O_APPEND,
                   std::string("--") + stream_name(stream));
}

// The caller's own stream, or /dev/null when it has none.
Result<UniqueFd> callers(int stream) {
  UniqueFd fd(fcntl(stream, F_DUPFD_CLOEXEC, 3));
  if (fd) return fd;
  return open_file("/dev/null", O_RDWR,
                   "standing in for a closed " + std::string(stream_name(stream)));
}

// While alive, files are opened and created with another user's rights (fsuid, fsgid and that
// user's groups): root restoring a user's checkpoint opens the paths the process recorded as that
// user, since any of them may have been turned into a symlink to anything since.
class OpenAs {
 public:
  OpenAs(uid_t uid, gid_t gid) {
    if (geteuid() != 0 || uid == 0) return;
    int n = getgroups(0, nullptr);
    saved_groups_.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    if (n > 0) getgroups(n, saved_groups_.data());
    std::vector<gid_t> groups = {gid};
    if (const passwd* pw = getpwuid(uid)) {
      int count = 64;
      groups.resize(static_cast<std::size_t>(count));
      if (getgrouplist(pw->pw_name, gid, groups.data(), &count) < 0)
        groups.assign(1, gid);
      else
        groups.resize(static_cast<std::size_t>(count));
    }
    (void)setgroups(groups.size(), groups.data());
    setfsgid(gid);
    setfsuid(uid);
    active_ = true;
  }
  ~OpenAs() {
    if (!active_) return;
    setfsuid(0);
    setfsgid(0);
    (void)setgroups(saved_groups_.size(), saved_groups_.data());
  }
  OpenAs(const OpenAs&) = delete;
  OpenAs& operator=(const OpenAs&) = delete;

 private:
  bool active_ = false;
  std::vector<gid_t> saved_groups_;
};

}  // namespace

Result<StreamPlan> plan_streams(const std::vector<OpenFile>& files, const std::set<pid_t>& roots,
                                const StreamOptions& o) {
  std::vector<std::string> order;
  std::map<std::string, Connection> conns;
  for (const auto& f : files) {
    if (f.key.empty()) continue;
    auto [it, fresh] = conns.try_emplace(f.key);
    if (fresh) {
      it->second.first = f;
      order.push_back(f.key);
    }
    if (roots.contains(f.pid) && f.fd >= 0 && f.fd <= 2) it->second.stdio.insert(f.fd);
    if ((f.flags & O_ACCMODE) != O_RDONLY) it->second.writable = true;
    if (f.flags & O_APPEND) it->second.append = true;
  }
  const std::string* option_file[3] = {&o.stdin_file, &o.stdout_file, &o.stderr_file};
  bool option_used[3] = {false, false, false};
  StreamPlan plan;
  for (const std::string& key : order) {
    const Connection& c = conns[key];
    const OpenFile& f = c.first;
    // Streams that share a connection get what stdout gets, else stderr, else stdin.
    int stream = c.stdio.count(1) ? 1 : c.stdio.count(2) ? 2 : c.stdio.count(0) ? 0 : -1;
    if (stream >= 0 && !option_file[stream]->empty()) {
      GCR_TRY_ASSIGN(UniqueFd fd, open_for_stream(stream, *option_file[stream]));
      option_used[stream] = true;
      plan.inherit.push_back({key, std::move(fd),
                              std::string(stream_name(stream)) + " -> " + *option_file[stream],
                              stream});
      continue;
    }
    if (f.kind == FileKind::regular) {
      OpenAs as_owner(o.owner_uid, o.owner_gid);  // a path the process chose
      int mode = f.flags & O_ACCMODE;
      if (c.writable && (c.append || mode == O_WRONLY)) {
        // A log: appended to as it is now.
        GCR_TRY_ASSIGN(UniqueFd fd,
                       open_file(f.path, (mode == O_RDWR ? O_RDWR : O_WRONLY) | O_APPEND | O_CREAT,
                                 "the process had it open for writing; give another file with "
                                 "--stdout/--stderr if it was one of those"));
        plan.inherit.push_back({key, std::move(fd), "appends to " + f.path});
        continue;
      }
      struct stat st {};
      bool exists = ::stat(f.path.c_str(), &st) == 0;
      if (exists && static_cast<std::uint64_t>(st.st_size) == f.size) continue;  // CRIU opens it
      if (!o.accept_changed.count(f.path))
        return Error{Errc::invalid_argument,
                     f.path +
                         (exists ? " changed since the checkpoint (" + std::to_string(f.size) +
                                       " bytes then, " + std::to_string(st.st_size) + " now)"
                                 : " no longer exists") +
                         ", and fd " + std::to_string(f.fd) + " of pid " + std::to_string(f.pid) +
                         " had it open for " +
                         (mode == O_RDONLY ? "reading" : "reading and writing") +
                         (exists ? "; restore it as it is now, at the old position, with "
                                   "--accept-changed " +
                                       f.path
                                 : "; put it back to restore this checkpoint")};
      GCR_TRY_ASSIGN(UniqueFd fd, open_file(f.path, mode, "--accept-changed"));
      if (lseek(fd.get(), static_cast<off_t>(f.pos), SEEK_SET) < 0)
        return errno_error("seeking " + f.path + " to where the process was");
      plan.inherit.push_back({key, std::move(fd), f.path + " as it is now"});
      continue;
    }
    if ((f.kind != FileKind::terminal && f.kind != FileKind::pipe) || !f.external) continue;
    const char* what = f.kind == FileKind::terminal ? "terminal" : "pipe";
    if (stream < 0) {
      GCR_TRY_ASSIGN(UniqueFd fd,
                     open_file("/dev/null", O_RDWR, "in place of a " + std::string(what)));
      plan.warnings.push_back("fd " + std::to_string(f.fd) + " of pid " + std::to_string(f.pid) +
                              " was a " + what + " to a process outside the checkpoint (" + f.path +
                              "); the restored process gets /dev/null there");
      plan.inherit.push_back({key, std::move(fd), "/dev/null"});
      continue;
    }
    if (o.detach) {
      GCR_TRY_ASSIGN(UniqueFd fd, stream == 0 ? open_file("/dev/null", O_RDONLY, "--detach")
                                              : open_for_stream(stream, o.detach_log));
      plan.inherit.push_back(
          {key, std::move(fd),
           std::string(stream_name(stream)) + " -> " + (stream == 0 ? "/dev/null" : o.detach_log),
           stream});
      continue;
    }
    GCR_TRY_ASSIGN(UniqueFd fd, callers(stream));
    plan.inherit.push_back(
        {key, std::move(fd),
         std::string(stream_name(stream)) + " -> gcr restore's " + stream_name(stream), stream,
         true});
  }
  for (int s = 0; s < 3; ++s) {
    if (option_file[s]->empty() || option_used[s]) continue;
    bool shared = false;
    for (const auto& [key, c] : conns)
      if (c.stdio.count(s) && c.stdio.size() > 1) shared = true;
    plan.warnings.push_back(
        std::string("--") + stream_name(s) + " ignored: the process's " + stream_name(s) +
        (shared ? " was one open file with its other streams, which get what stdout gets"
                : " was neither a file, a terminal nor a pipe (CRIU restores it as it was)"));
  }
  return plan;
}

}  // namespace gcr::cli
