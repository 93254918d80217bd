// Starting gcr-keeper (keeper.h; the keeper itself is keeper_main.cpp).
#include "keeper.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>

#include "lineage.h"

extern char** environ;

namespace gcr::gcrd {
namespace fs = std::filesystem;

namespace {
Status write_all(int fd, const std::string& text) {
  for (std::size_t off = 0; off < text.size();) {
    ssize_t w = write(fd, text.data() + off, text.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return errno_error("telling the keeper what it keeps");
    off += static_cast<std::size_t>(w);
  }
  return ok();
}

// Starts gcr-keeper with `fds` at 3, 4, ... and tells it `text`.
Result<Keeper> start_keeper(const std::string& text, const std::vector<int>& fds) {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  fs::path bin = self.parent_path() / "gcr-keeper";
  if (ec || access(bin.c_str(), X_OK) != 0)
    return Error{Errc::not_found,
                 "gcr-keeper is missing next to gcrd (" + bin.string() + "); reinstall gcr"};
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return errno_error("creating the keeper's pipe");
  UniqueFd read_end(p[0]), write_end(p[1]);
  // The parked fds go to 3, 4, ...: first moved above that range, so that no dup2 overwrites a
  // source it has yet to copy.
  const int n = static_cast<int>(fds.size());
  std::vector<UniqueFd> high;
  for (int from : fds) {
    int fd = fcntl(from, F_DUPFD_CLOEXEC, 3 + n);
    if (fd < 0) return errno_error("duplicating a parked fd for the keeper");
    high.emplace_back(fd);
  }
  int rfd = fcntl(read_end.get(), F_DUPFD_CLOEXEC, 3 + n);
  if (rfd < 0) return errno_error("duplicating the keeper's pipe");
  UniqueFd read_high(rfd);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, read_high.get(), 0);
  for (int i = 0; i < n; ++i) posix_spawn_file_actions_adddup2(&actions, high[i].get(), 3 + i);
  posix_spawn_file_actions_addclosefrom_np(&actions, 3 + n);
  std::string arg0 = bin.string();
  char* argv[] = {arg0.data(), nullptr};
  pid_t child = 0;
  int rc = posix_spawn(&child, arg0.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return errno_error("starting " + arg0, rc);
  std::thread([child] { waitpid(child, nullptr, 0); }).detach();

  GCR_TRY(write_all(write_end.get(), text));
  return Keeper::from_pipe(std::move(write_end));
}

// "pid N\nstart TICKS\n", under other names where the keeper is told of another process.
Result<std::string> process_lines(pid_t pid, const char* pid_word = "pid",
                                  const char* start_word = "start") {
  auto key = process_key(pid);
  if (!key) return Error{Errc::not_found, "process " + std::to_string(pid) + " has exited"};
  return std::string(pid_word) + " " + std::to_string(pid) + "\n" + start_word + " " +
         std::to_string(key->start_time) + "\n";
}
}  // namespace

Result<Keeper> Keeper::start(pid_t pid, const std::vector<control::ParkedRegion>& parked,
                             const std::vector<pid_t>& stopped_roots) {
  GCR_TRY_ASSIGN(std::string text, process_lines(pid));
  for (pid_t root : stopped_roots) text += "stopped_root " + std::to_string(root) + "\n";
  for (const auto& r : parked)
    text += "region " + std::to_string(r.region.address) + " " + std::to_string(r.region.size) +
            " " + std::to_string(r.region.device) + " " + std::to_string(r.region.flags) + "\n";
  std::vector<int> fds;
  for (const auto& r : parked) fds.push_back(r.fd.get());
  return start_keeper(text + "go\n", fds);
}

Result<Keeper> Keeper::start_restore(const fs::path& pidfile, int host_pages_fd) {
  std::string text = "mode restore\n";
  if (!pidfile.empty() && pidfile.string().find('\n') == std::string::npos)
    text += "pidfile " + pidfile.string() + "\n";
  std::vector<int> fds;
  if (host_pages_fd >= 0) {
    text += "host\n";
    fds.push_back(host_pages_fd);
  }
  return start_keeper(text, fds);
}

Status Keeper::restoring_in_namespace(pid_t unshare_pid, const fs::path& ready_file) {
  if (!pipe_) return Error{Errc::internal, "the keeper is not running"};
  if (ready_file.string().find('\n') != std::string::npos)
    return Error{Errc::invalid_argument, "a ready file name with a newline"};
  GCR_TRY_ASSIGN(std::string text, process_lines(unshare_pid, "nsroot", "nsroot_start"));
  return write_all(pipe_.get(), text + "ready " + ready_file.string() + "\n");
}

Status Keeper::restoring_in(pid_t pid) {
  if (!pipe_) return Error{Errc::internal, "the keeper is not running"};
  GCR_TRY_ASSIGN(std::string text, process_lines(pid, "criu", "criu_start"));
  return write_all(pipe_.get(), text);
}

Status Keeper::restored(pid_t pid) {
  if (!pipe_) return Error{Errc::internal, "the keeper is not running"};
  GCR_TRY_ASSIGN(std::string text, process_lines(pid));
  return write_all(pipe_.get(), text + "go\n");
}

void Keeper::done() noexcept {
  if (!pipe_) return;
  ssize_t w;
  do w = write(pipe_.get(), "done\n", 5);
  while (w < 0 && errno == EINTR);
  pipe_.reset();
}

namespace {
void tell(const UniqueFd& pipe, std::string_view line) noexcept {
  if (!pipe) return;
  ssize_t w;
  do w = write(pipe.get(), line.data(), line.size());
  while (w < 0 && errno == EINTR);
}
}  // namespace

void Keeper::handed_over() noexcept {
  tell(pipe_, "handed\n");
}
void Keeper::kept() noexcept {
  tell(pipe_, "kept\n");
}
void Keeper::say(std::string_view lines) noexcept {
  tell(pipe_, lines);
}

}  // namespace gcr::gcrd
