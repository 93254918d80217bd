// container_runtime.h: runc for a container's migration.
#include "container_runtime.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

#include "gcr/criu.h"

namespace gcr::gcrd {
namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The last lines of a runtime's output (or of CRIU's log, lines with "Error"), for a message.
std::string tail_of(const fs::path& p, std::size_t lines, bool errors_only = false) {
  std::istringstream in(read_all(p));
  std::vector<std::string> kept;
  for (std::string l; std::getline(in, l);)
    if (!l.empty() && (!errors_only || l.find("Error") != std::string::npos)) kept.push_back(l);
  std::string out;
  for (std::size_t i = kept.size() > lines ? kept.size() - lines : 0; i < kept.size(); ++i)
    out += (out.empty() ? "" : " | ") + kept[i];
  return out;
}

std::map<std::string, std::string> plugin_env(const ContainerRuntime& rt) {
  std::map<std::string, std::string> env;
  if (!rt.plugin_dir.empty()) env["CRIU_LIBS_DIR"] = rt.plugin_dir.string();
  if (!rt.gcrd_socket.empty()) env["GCR_GCRD_SOCKET"] = rt.gcrd_socket.string();
  if (!rt.store.empty()) env["GCR_STORE"] = rt.store.string();
  if (!rt.driver.empty()) env["GCR_REAL_LIBCUDA"] = rt.driver.string();
  env["GCR_CRIU_IMAGES"] = "reference";  // the device memory travels by gcr's own push
  return env;
}

// Runs the runtime (output into `log`); an error naming what failed and why.
Status run_runtime(const ContainerRuntime& rt, std::vector<std::string> args, const fs::path& log,
                   const fs::path& criu_log, const std::string& what) {
  std::vector<std::string> argv = {rt.binary.string()};
  if (!rt.criu.empty()) {
    argv.push_back("--criu");
    argv.push_back(rt.criu.string());
  }
  argv.insert(argv.end(), args.begin(), args.end());
  GCR_TRY_ASSIGN(int rc, criu::run(argv, plugin_env(rt), log));
  if (rc == 0) return ok();
  std::string why = tail_of(log, 2);
  std::string criu_errors = criu_log.empty() ? "" : tail_of(criu_log, 3, true);
  return Error{Errc::io_error, what + " failed (" + rt.binary.filename().string() + " exit " +
                                   std::to_string(rc) + (why.empty() ? "" : ": " + why) + ")" +
                                   (criu_errors.empty() ? "" : "; CRIU: " + criu_errors) +
                                   (criu_log.empty() ? "" : "; CRIU's log: " + criu_log.string())};
}

// `"key": "value"` or `"key": 123` of runc's state JSON (flat fields only).
std::string json_scalar(const std::string& json, const std::string& key) {
  auto k = json.find("\"" + key + "\"");
  if (k == std::string::npos) return "";
  auto colon = json.find(':', k);
  if (colon == std::string::npos) return "";
  auto v = json.find_first_not_of(" \t\n", colon + 1);
  if (v == std::string::npos) return "";
  if (json[v] == '"') {
    auto end = json.find('"', v + 1);
    return end == std::string::npos ? "" : json.substr(v + 1, end - v - 1);
  }
  auto end = json.find_first_of(",}\n", v);
  return json.substr(v, end == std::string::npos ? std::string::npos : end - v);
}

}  // namespace

Result<fs::path> find_container_runtime(const std::string& name) {
  const std::string n = name.empty() ? "runc" : name;
  if (n.find('/') != std::string::npos) {
    if (::access(n.c_str(), X_OK) == 0) return fs::absolute(n);
    return Error{Errc::not_found, "the container runtime " + n + " is not an executable"};
  }
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/sbin:/usr/bin:/sbin:/bin");
  for (std::string d; std::getline(dirs, d, ':');)
    if (!d.empty() && ::access((fs::path(d) / n).c_str(), X_OK) == 0) return fs::path(d) / n;
  return Error{Errc::not_found, "no container runtime '" + n +
                                    "' in PATH; install runc (apt-get install runc) or name it "
                                    "with --runtime PATH"};
}

bool valid_container_name(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && (i == 0 || (c != '_' && c != '.' && c != '-' && c != '+'))) return false;
  }
  return true;
}

Result<ContainerState> container_state(const ContainerRuntime& rt, const std::string& name) {
  if (!valid_container_name(name))
    return Error{Errc::invalid_argument, "'" + name + "' is not a container name"};
  char tmpl[] = "/tmp/gcr-runtime-state.XXXXXX";
  int fd = ::mkstemp(tmpl);
  if (fd < 0) return errno_error("a temporary file for the runtime's answer");
  ::close(fd);
  const fs::path out = tmpl;
  auto rc = criu::run({rt.binary.string(), "state", name}, {}, out);
  std::string json = read_all(out);
  std::error_code ec;
  fs::remove(out, ec);
  if (!rc) return std::move(rc).error();
  if (*rc != 0)
    return Error{Errc::not_found, "no container '" + name + "' (" + rt.binary.filename().string() +
                                      " state: " + json.substr(0, json.find('\n')) + ")"};
  ContainerState s;
  s.pid = static_cast<pid_t>(std::atoi(json_scalar(json, "pid").c_str()));
  s.status = json_scalar(json, "status");
  s.bundle = json_scalar(json, "bundle");
  if (s.bundle.empty())
    return Error{Errc::protocol,
                 "the runtime's state of '" + name + "' names no bundle: " + json.substr(0, 300)};
  return s;
}

Status checkpoint_container(const ContainerRuntime& rt, const std::string& name,
                            const fs::path& images, const fs::path& work) {
  return run_runtime(
      rt, {"checkpoint", "--image-path", images.string(), "--work-path", work.string(), name},
      work / "runtime.log", work / "dump.log", "checkpointing container " + name);
}

Status restore_container(const ContainerRuntime& rt, const std::string& name,
                         const fs::path& bundle, const fs::path& images, const fs::path& work) {
  return run_runtime(rt,
                     {"restore", "--detach", "--image-path", images.string(), "--work-path",
                      work.string(), "--bundle", bundle.string(), name},
                     work / "runtime.log", work / "restore.log", "restoring container " + name);
}

}  // namespace gcr::gcrd
