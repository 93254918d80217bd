// container_runtime.h: runc for a container's migration, and podman through podman_runtime.h.
#include "container_runtime.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

#include "gcr/criu.h"
#include "gcrd_protocol.h"
#include "podman_runtime.h"
#include "runtime_exec.h"

namespace gcr::gcrd {
namespace {

namespace fs = std::filesystem;

// Runs runc (with --criu when given; output into `log`).
Status run_runc(const ContainerRuntime& rt, std::vector<std::string> args, const fs::path& log,
                const fs::path& criu_log, const std::string& what) {
  std::vector<std::string> argv = {rt.binary.string()};
  if (!rt.criu.empty()) {
    argv.push_back("--criu");
    argv.push_back(rt.criu.string());
  }
  argv.insert(argv.end(), args.begin(), args.end());
  return run_runtime_command(argv, plugin_env(rt), log, criu_log, what);
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

const char* runtime_kind_name(RuntimeKind kind) {
  return kind == RuntimeKind::podman ? "podman" : "runc";
}

Result<RuntimeKind> parse_runtime_kind(const std::string& name) {
  if (name == "runc") return RuntimeKind::runc;
  if (name == "podman") return RuntimeKind::podman;
  return Error{Errc::unsupported, "container runtime '" + name + "': runc or podman"};
}

Result<RuntimeKind> container_runtime_kind(const fs::path& binary) {
  GCR_TRY_ASSIGN(CommandOutput out, run_for_output({binary.string(), "--version"}));
  if (out.status != 0)
    return Error{Errc::not_found,
                 binary.string() + " --version failed: " + out.text.substr(0, out.text.find('\n'))};
  return out.text.starts_with("podman") ? RuntimeKind::podman : RuntimeKind::runc;
}

Result<ContainerState> container_state(const ContainerRuntime& rt, const std::string& name) {
  if (!valid_container_name(name))
    return Error{Errc::invalid_argument, "'" + name + "' is not a container name"};
  if (rt.kind == RuntimeKind::podman) return podman_state(rt, name);
  GCR_TRY_ASSIGN(CommandOutput out, run_for_output({rt.binary.string(), "state", name}));
  const std::string& json = out.text;
  if (out.status != 0)
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
  if (rt.kind == RuntimeKind::podman) return podman_checkpoint(rt, name, images, work);
  return run_runc(
      rt, {"checkpoint", "--image-path", images.string(), "--work-path", work.string(), name},
      work / "runtime.log", work / "dump.log", "checkpointing container " + name);
}

Result<std::string> read_checkpoint_reference(const ContainerRuntime& rt, const fs::path& images) {
  if (rt.kind == RuntimeKind::podman) return podman_reference(images);
  std::ifstream in(images / kImagesReferenceName);
  if (!in) return Error{Errc::not_found, "no " + (images / kImagesReferenceName).string()};
  return std::string(std::istreambuf_iterator<char>(in), {});
}

Status restore_container(const ContainerRuntime& rt, const std::string& name,
                         const fs::path& bundle, const fs::path& images, const fs::path& work) {
  if (rt.kind == RuntimeKind::podman) return podman_import(rt, name, images, work);
  return run_runc(rt,
                  {"restore", "--detach", "--image-path", images.string(), "--work-path",
                   work.string(), "--bundle", bundle.string(), name},
                  work / "runtime.log", work / "restore.log", "restoring container " + name);
}

Status restore_checkpointed_container(const ContainerRuntime& rt, const std::string& name,
                                      const fs::path& bundle, const fs::path& images,
                                      const fs::path& work) {
  if (rt.kind == RuntimeKind::podman) return podman_restore_kept(rt, name, work);
  return restore_container(rt, name, bundle, images, work);
}

std::string restore_checkpointed_command(const ContainerRuntime& rt, const std::string& name,
                                         const fs::path& bundle, const fs::path& images) {
  if (rt.kind == RuntimeKind::podman)
    return rt.binary.filename().string() + " container restore " + name + " (or --import " +
           (images / kPodmanArchiveName).string() + ")";
  return rt.binary.filename().string() + " restore --image-path " + images.string() + " --bundle " +
         bundle.string() + " " + name;
}

Status remove_checkpointed_container(const ContainerRuntime& rt, const std::string& name,
                                     const fs::path& work) {
  if (rt.kind == RuntimeKind::podman) return podman_remove(rt, name, work);
  return ok();
}

}  // namespace gcr::gcrd
