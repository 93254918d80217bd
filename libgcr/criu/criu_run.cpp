// Running CRIU for gcr (gcr/criu.h). gcr's processes are started by `gcr run` without a
// terminal of their own, so dumps use --shell-job only when the process has one, and restores
// detach (-d) so that CRIU hands the process back and exits.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "gcr/criu.h"

extern char** environ;

namespace gcr::criu {
namespace fs = std::filesystem;

namespace {

bool executable(const fs::path& p) {
  return !p.empty() && access(p.c_str(), X_OK) == 0;
}

// The last lines of a CRIU log that say what went wrong.
std::string log_tail(const fs::path& log) {
  std::ifstream in(log);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::string errors;
  for (const auto& l : lines)
    if (l.find("Error") != std::string::npos || l.find("error") != std::string::npos)
      errors += "\n    " + l;
  if (errors.empty())
    for (std::size_t i = lines.size() > 5 ? lines.size() - 5 : 0; i < lines.size(); ++i)
      errors += "\n    " + lines[i];
  return errors;
}

bool has_terminal(pid_t pid) {
  char link[64], target[256];
  std::snprintf(link, sizeof link, "/proc/%d/fd/0", pid);
  ssize_t n = readlink(link, target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = 0;
  return std::strncmp(target, "/dev/pts/", 9) == 0 || std::strncmp(target, "/dev/tty", 8) == 0;
}

}  // namespace

Result<Tools> find_tools(const fs::path& self_dir) {
  Tools t;
  if (const char* c = std::getenv("GCR_CRIU"); c && *c) t.criu = c;
  std::vector<fs::path> roots = {self_dir, self_dir.parent_path(),
                                 self_dir.parent_path().parent_path()};
  for (const fs::path& r : roots) {
    if (t.criu.empty() && executable(r / ".deps/criu/criu")) t.criu = r / ".deps/criu/criu";
  }
  if (t.criu.empty()) {
    for (const char* p :
         {"/usr/local/sbin/criu", "/usr/sbin/criu", "/usr/local/bin/criu", "/usr/bin/criu"})
      if (executable(p)) {
        t.criu = p;
        break;
      }
  }
  if (!executable(t.criu))
    return Error{Errc::not_found,
                 "CRIU not found; run scripts/setup.sh (it builds CRIU 4.2 into .deps/criu) or set "
                 "GCR_CRIU"};
  if (const char* d = std::getenv("GCR_CRIU_PLUGIN_DIR"); d && *d) t.plugin_dir = d;
  for (const fs::path& r : roots)
    if (t.plugin_dir.empty() && fs::exists(r / "criu-plugin/gcr_criu_plugin.so"))
      t.plugin_dir = r / "criu-plugin";
  if (t.plugin_dir.empty() || !fs::exists(t.plugin_dir / "gcr_criu_plugin.so"))
    return Error{
        Errc::not_found,
        "gcr's CRIU plugin (gcr_criu_plugin.so) not found; build gcr or set GCR_CRIU_PLUGIN_DIR"};
  return t;
}

Result<int> run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                const fs::path& log) {
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos && env.count(kv.substr(0, eq))) continue;
    envs.push_back(kv);
  }
  for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : envs) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  if (!log.empty()) {
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  }
  pid_t child;
  int rc = posix_spawn(&child, cargv[0], &actions, nullptr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return errno_error("starting " + argv[0], rc);
  int status = 0;
  while (waitpid(child, &status, 0) < 0)
    if (errno != EINTR) return errno_error("waiting for " + argv[0]);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

Status dump(const Tools& tools, const DumpOptions& o) {
  fs::path log = o.image_dir / "dump.log";
  std::vector<std::string> argv = {tools.criu.string(),
                                   "dump",
                                   "-t",
                                   std::to_string(o.pid),
                                   "-D",
                                   o.image_dir.string(),
                                   "-L",
                                   tools.plugin_dir.string(),
                                   "-o",
                                   "dump.log",
                                   "-v4"};
  if (o.leave_running) argv.push_back("-R");
  if (has_terminal(o.pid)) argv.push_back("--shell-job");
  auto env = o.env;
  if (o.leave_running) env["GCR_LEAVE_RUNNING"] = "1";
  GCR_TRY_ASSIGN(int rc, run(argv, env, o.image_dir / "criu.out"));
  if (rc != 0)
    return Error{Errc::io_error, "criu dump of pid " + std::to_string(o.pid) + " failed (exit " +
                                     std::to_string(rc) + "); from " + log.string() + ":" +
                                     log_tail(log)};
  return ok();
}

Status restore(const Tools& tools, const RestoreOptions& o) {
  fs::path log = o.image_dir / "restore.log";
  fs::path pidfile = o.image_dir / "restored.pid";
  std::error_code ec;
  fs::remove(pidfile, ec);
  std::vector<std::string> argv = {tools.criu.string(),
                                   "restore",
                                   "-D",
                                   o.image_dir.string(),
                                   "-L",
                                   tools.plugin_dir.string(),
                                   "-d",
                                   "--pidfile",
                                   pidfile.string(),
                                   "-o",
                                   "restore.log",
                                   "-v4"};
  GCR_TRY_ASSIGN(int rc, run(argv, o.env, o.image_dir / "criu.out"));
  if (rc != 0)
    return Error{Errc::io_error, "criu restore failed (exit " + std::to_string(rc) + "); from " +
                                     log.string() + ":" + log_tail(log)};
  if (o.restored_pid) {
    std::ifstream in(pidfile);
    pid_t pid = 0;
    in >> pid;
    *o.restored_pid = pid;
  }
  return ok();
}

}  // namespace gcr::criu
