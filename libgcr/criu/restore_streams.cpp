#include "gcr/restore_streams.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/openat2.h>
#include <pwd.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <sstream>
#include <vector>

#include "gcr/trusted_path.h"

namespace gcr::criu {
namespace {

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

// A path the process recorded (the kernel's, resolved: it held no link then), opened resolving no
// symbolic link: one on it now was put there since (Note [Files reopened for the restored
// process] in restore_streams.h).
Result<UniqueFd> open_recorded(const std::string& path, int flags, const std::string& why) {
  open_how how{};
  how.flags = static_cast<std::uint64_t>(flags | O_CLOEXEC | O_NOCTTY);
  how.mode = (flags & O_CREAT) ? 0644 : 0;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  long fd = ::syscall(SYS_openat2, AT_FDCWD, path.c_str(), &how, sizeof how);
  if (fd < 0 && errno == ENOSYS)  // before Linux 5.6: the last component at least
    fd = ::open(path.c_str(), flags | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW, 0644);
  if (fd < 0 && errno == ELOOP)
    return Error{Errc::permission_denied,
                 path + " is a symbolic link now, or a directory on its way is; it was neither " +
                     "at the checkpoint. gcr does not restore a process through a link someone " +
                     "made since (" + why + "): put the file back as it was"};
  if (fd < 0) return errno_error("cannot open " + path + " (" + why + ")");
  return UniqueFd(static_cast<int>(fd));
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
  // Per thread, as the kernel keeps credentials: raw setgroups (glibc's would change every thread
  // of gcrd's) and setfsuid/setfsgid; the user's groups looked up reentrantly.
  OpenAs(uid_t uid, gid_t gid) {
    if (geteuid() != 0 || uid == 0) return;
    int n = getgroups(0, nullptr);
    saved_groups_.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    if (n > 0) getgroups(n, saved_groups_.data());
    std::vector<gid_t> groups = {gid};
    passwd pw{};
    passwd* found = nullptr;
    std::vector<char> buf(16384);
    if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found) {
      int count = 64;
      groups.resize(static_cast<std::size_t>(count));
      if (getgrouplist(pw.pw_name, gid, groups.data(), &count) < 0)
        groups.assign(1, gid);
      else
        groups.resize(static_cast<std::size_t>(count));
    }
    (void)::syscall(SYS_setgroups, groups.size(), groups.data());
    setfsgid(gid);
    setfsuid(uid);
    active_ = true;
  }
  ~OpenAs() {
    if (!active_) return;
    setfsuid(0);
    setfsgid(0);
    (void)::syscall(SYS_setgroups, saved_groups_.size(), saved_groups_.data());
  }
  OpenAs(const OpenAs&) = delete;
  OpenAs& operator=(const OpenAs&) = delete;

 private:
  bool active_ = false;
  std::vector<gid_t> saved_groups_;
};

// The size the process saw: a file that changed size since would fail its reads or its mappings.
Status same_size(int fd, const OpenFile& f) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errno_error("stat " + f.path);
  if (!S_ISREG(st.st_mode))
    return Error{Errc::invalid_argument, f.path + " is no longer a regular file"};
  if (static_cast<std::uint64_t>(st.st_size) != f.size)
    return Error{Errc::invalid_argument,
                 f.path + " changed since the checkpoint (" + std::to_string(f.size) +
                     " bytes then, " + std::to_string(st.st_size) +
                     " now); restore it as it is now with --accept-changed " + f.path};
  return ok();
}

// Note [Files reopened for the restored process]: the mapped files no fd took care of, opened
// here unless only root can change them.
Status plan_mapped(const std::map<std::string, const OpenFile*>& mapped, const StreamOptions& o,
                   StreamPlan& plan) {
  for (const auto& [key, f] : mapped) {
    if (only_root_can_change(f->path)) continue;  // CRIU opens it
    OpenAs as_owner(o.owner_uid, o.owner_gid);
    GCR_TRY_ASSIGN(UniqueFd fd,
                   open_recorded(f->path, f->flags & O_ACCMODE, "the process had it mapped"));
    if (!o.accept_changed.count(f->path)) GCR_TRY(same_size(fd.get(), *f));
    plan.inherit.push_back({key, std::move(fd), f->path + " (mapped)"});
  }
  return ok();
}

// What the checkpoint's files say, gathered: each connection once (in the order first seen) with
// the streams it was, and the mapped files by key (O_RDWR if any mapping needs it).
struct Gathered {
  std::vector<std::string> order;
  std::map<std::string, Connection> conns;
  std::map<std::string, const OpenFile*> mapped;
};

Gathered gather(const std::vector<OpenFile>& files, const std::set<pid_t>& roots) {
  Gathered g;
  for (const auto& f : files) {
    if (f.key.empty()) continue;
    if (f.fd < 0) {  // a mapped file
      auto [it, fresh] = g.mapped.try_emplace(f.key, &f);
      if (!fresh && (f.flags & O_ACCMODE) == O_RDWR) it->second = &f;
      continue;
    }
    auto [it, fresh] = g.conns.try_emplace(f.key);
    if (fresh) {
      it->second.first = f;
      g.order.push_back(f.key);
    }
    if (roots.contains(f.pid) && f.fd >= 0 && f.fd <= 2) it->second.stdio.insert(f.fd);
    if ((f.flags & O_ACCMODE) != O_RDONLY) it->second.writable = true;
    if (f.flags & O_APPEND) it->second.append = true;
  }
  return g;
}

Error changed_file(const OpenFile& f, bool exists, const struct stat& st, int mode) {
  return Error{Errc::invalid_argument,
               f.path +
                   (exists ? " changed since the checkpoint (" + std::to_string(f.size) +
                                 " bytes then, " + std::to_string(st.st_size) + " now)"
                           : " no longer exists") +
                   ", and fd " + std::to_string(f.fd) + " of pid " + std::to_string(f.pid) +
                   " had it open for " + (mode == O_RDONLY ? "reading" : "reading and writing") +
                   (exists ? "; restore it as it is now, at the old position, with "
                             "--accept-changed " +
                                 f.path
                           : "; put it back to restore this checkpoint")};
}

// A regular file the process had open, opened here as its owner (Note [Files reopened for the
// restored process]); a mapping of the same file is taken care of with it.
Status plan_regular(const std::string& key, const Connection& c, const StreamOptions& o,
                    std::map<std::string, const OpenFile*>& mapped, StreamPlan& plan) {
  const OpenFile& f = c.first;
  OpenAs as_owner(o.owner_uid, o.owner_gid);  // a path the process chose
  int mode = f.flags & O_ACCMODE;
  auto m = mapped.find(key);
  const bool mapped_rdwr = m != mapped.end() && (m->second->flags & O_ACCMODE) == O_RDWR;
  if (c.writable && (c.append || mode == O_WRONLY)) {
    // A log: appended to as it is now.
    const bool rdwr = mode == O_RDWR || mapped_rdwr;
    GCR_TRY_ASSIGN(UniqueFd fd,
                   open_recorded(f.path, (rdwr ? O_RDWR : O_WRONLY) | O_APPEND | O_CREAT,
                                 "the process had it open for writing; give another file "
                                 "with --stdout/--stderr if it was one of those"));
    plan.inherit.push_back({key, std::move(fd), "appends to " + f.path});
    mapped.erase(key);
    return ok();
  }
  if (mapped_rdwr) mode = O_RDWR;
  struct stat st {};
  const bool exists = ::stat(f.path.c_str(), &st) == 0;
  const bool same = exists && static_cast<std::uint64_t>(st.st_size) == f.size;
  if (!same && !o.accept_changed.count(f.path)) return changed_file(f, exists, st, mode);
  GCR_TRY_ASSIGN(UniqueFd fd, open_recorded(f.path, mode,
                                            same ? "the process had it open" : "--accept-changed"));
  if (same) GCR_TRY(same_size(fd.get(), f));
  if (lseek(fd.get(), static_cast<off_t>(f.pos), SEEK_SET) < 0)
    return errno_error("seeking " + f.path + " to where the process was");
  plan.inherit.push_back({key, std::move(fd), same ? f.path : f.path + " as it is now"});
  mapped.erase(key);
  return ok();
}

// A terminal or pipe to a process outside the checkpoint: what takes its place.
Status plan_outside_stream(const std::string& key, const OpenFile& f, int stream,
                           const StreamOptions& o, StreamPlan& plan) {
  const char* what = f.kind == FileKind::terminal ? "terminal" : "pipe";
  if (stream < 0) {
    GCR_TRY_ASSIGN(UniqueFd fd,
                   open_file("/dev/null", O_RDWR, "in place of a " + std::string(what)));
    plan.warnings.push_back("fd " + std::to_string(f.fd) + " of pid " + std::to_string(f.pid) +
                            " was a " + what + " to a process outside the checkpoint (" + f.path +
                            "); the restored process gets /dev/null there");
    plan.inherit.push_back({key, std::move(fd), "/dev/null"});
    return ok();
  }
  if (o.detach) {
    GCR_TRY_ASSIGN(UniqueFd fd, stream == 0 ? open_file("/dev/null", O_RDONLY, "--detach")
                                            : open_for_stream(stream, o.detach_log));
    plan.inherit.push_back(
        {key, std::move(fd),
         std::string(stream_name(stream)) + " -> " + (stream == 0 ? "/dev/null" : o.detach_log),
         stream});
    return ok();
  }
  GCR_TRY_ASSIGN(UniqueFd fd, callers(stream));
  plan.inherit.push_back(
      {key, std::move(fd),
       std::string(stream_name(stream)) + " -> gcr restore's " + stream_name(stream), stream,
       true});
  return ok();
}

}  // namespace

Result<StreamPlan> plan_streams(const std::vector<OpenFile>& files, const std::set<pid_t>& roots,
                                const StreamOptions& o) {
  Gathered g = gather(files, roots);
  const std::string* option_file[3] = {&o.stdin_file, &o.stdout_file, &o.stderr_file};
  bool option_used[3] = {false, false, false};
  StreamPlan plan;
  for (const std::string& key : g.order) {
    const Connection& c = g.conns[key];
    const OpenFile& f = c.first;
    // Streams that share a connection get what stdout gets, else stderr, else stdin.
    int stream = c.stdio.count(1) ? 1 : c.stdio.count(2) ? 2 : c.stdio.count(0) ? 0 : -1;
    if (stream >= 0 && !o.files_only && !option_file[stream]->empty()) {
      GCR_TRY_ASSIGN(UniqueFd fd, open_for_stream(stream, *option_file[stream]));
      option_used[stream] = true;
      plan.inherit.push_back({key, std::move(fd),
                              std::string(stream_name(stream)) + " -> " + *option_file[stream],
                              stream});
    } else if (f.kind == FileKind::regular) {
      GCR_TRY(plan_regular(key, c, o, g.mapped, plan));
    } else if ((f.kind == FileKind::terminal || f.kind == FileKind::pipe) && f.external &&
               !o.files_only) {
      GCR_TRY(plan_outside_stream(key, f, stream, o, plan));
    }
  }
  GCR_TRY(plan_mapped(g.mapped, o, plan));
  for (int s = 0; s < 3; ++s) {
    if (option_file[s]->empty() || option_used[s]) continue;
    bool shared = false;
    for (const auto& [key, c] : g.conns)
      if (c.stdio.count(s) && c.stdio.size() > 1) shared = true;
    plan.warnings.push_back(
        std::string("--") + stream_name(s) + " ignored: the process's " + stream_name(s) +
        (shared ? " was one open file with its other streams, which get what stdout gets"
                : " was neither a file, a terminal nor a pipe (CRIU restores it as it was)"));
  }
  return plan;
}

Result<StreamPlan> plan_streams(const std::map<std::string, std::string>& meta,
                                StreamOptions options) {
  auto field = [&](const char* key, const char* fallback) {
    auto it = meta.find(key);
    return it == meta.end() ? std::string(fallback) : it->second;
  };
  GCR_TRY_ASSIGN(auto files, decode_files(field("files", "")));
  options.owner_uid = static_cast<uid_t>(std::atoll(field("owner_uid", "0").c_str()));
  options.owner_gid = static_cast<gid_t>(std::atoll(field("owner_gid", "0").c_str()));
  std::set<pid_t> roots{static_cast<pid_t>(std::atoll(field("pid", "0").c_str()))};
  std::istringstream trees(field("job_trees", ""));  // "PID [shell_job]" per line
  for (std::string line; std::getline(trees, line);)
    if (pid_t p = static_cast<pid_t>(std::atoll(line.c_str())); p > 0) roots.insert(p);
  return plan_streams(files, roots, options);
}

}  // namespace gcr::criu
