// podman_runtime.h: podman 4 for a container's migration.
#include "podman_runtime.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "gcr/unique_fd.h"
#include "gcrd_protocol.h"
#include "runtime_exec.h"
#include "tar_members.h"

namespace gcr::gcrd {
namespace {

namespace fs = std::filesystem;

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Note [podman's CRIU]: WORK/bin/criu, and the environment that puts it first in PATH.
Result<std::map<std::string, std::string>> podman_env(const ContainerRuntime& rt,
                                                      const fs::path& work) {
  std::string script = "#!/bin/sh\n# gcr: the CRIU podman runs, with gcr's plugin and settings\n";
  for (const auto& [k, v] : plugin_env(rt)) script += "export " + k + "=" + shell_quote(v) + "\n";
  script += "exec " + shell_quote(rt.criu.empty() ? "criu" : rt.criu.string()) + " \"$@\"\n";
  const fs::path bin = work / "bin";
  if (::mkdir(bin.c_str(), 0700) != 0 && errno != EEXIST)
    return errno_error("creating " + bin.string());
  const fs::path wrapper = bin / "criu";
  ::unlink(wrapper.c_str());
  UniqueFd fd(::open(wrapper.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0700));
  if (!fd || ::write(fd.get(), script.data(), script.size()) != static_cast<ssize_t>(script.size()))
    return errno_error("writing " + wrapper.string());
  const char* path = std::getenv("PATH");
  return std::map<std::string, std::string>{
      {"PATH", bin.string() + ":" + (path ? path : "/usr/sbin:/usr/bin:/sbin:/bin")}};
}

Status run_podman(const ContainerRuntime& rt, std::vector<std::string> args, const fs::path& work,
                  const std::string& what) {
  GCR_TRY_ASSIGN(auto env, podman_env(rt, work));
  args.insert(args.begin(), rt.binary.string());
  return run_runtime_command(args, env, work / "runtime.log", {}, what);
}

}  // namespace

Result<ContainerState> podman_state(const ContainerRuntime& rt, const std::string& name) {
  GCR_TRY_ASSIGN(CommandOutput out,
                 run_for_output({rt.binary.string(), "container", "inspect", "--format",
                                 "{{.State.Pid}} {{.State.Status}}", name}));
  if (out.status != 0)
    return Error{Errc::not_found,
                 "no container '" + name + "' (" + rt.binary.filename().string() +
                     " container inspect: " + out.text.substr(0, out.text.find('\n')) + ")"};
  std::istringstream in(out.text);
  ContainerState s;
  if (!(in >> s.pid >> s.status))
    return Error{Errc::protocol, "podman's state of '" + name + "': " + out.text.substr(0, 300)};
  if (s.status == "exited" || s.status == "created") s.pid = 0;
  return s;
}

Status podman_checkpoint(const ContainerRuntime& rt, const std::string& name,
                         const fs::path& images, const fs::path& work) {
  // --keep: the images stay with podman, for podman_restore_kept() should the move fail.
  // --compress none: ~1 MiB of CRIU images; the destination reads the archive's members.
  return run_podman(rt,
                    {"container", "checkpoint", "--export", (images / kPodmanArchiveName).string(),
                     "--compress", "none", "--keep", name},
                    work, "checkpointing container " + name);
}

Result<std::string> podman_reference(const fs::path& images) {
  const fs::path archive = images / kPodmanArchiveName;
  UniqueFd fd(::open(archive.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return errno_error("opening " + archive.string());
  GCR_TRY_ASSIGN(std::vector<TarMember> members, list_tar_members(fd.get()));
  for (const TarMember& m : members)
    if (m.name == std::string("checkpoint/") + kImagesReferenceName)
      return read_tar_member(fd.get(), m, 4096);
  return Error{Errc::not_found,
               archive.string() + " has no checkpoint/" + std::string(kImagesReferenceName)};
}

Status podman_import(const ContainerRuntime& rt, const std::string& name, const fs::path& images,
                     const fs::path& work) {
  return run_podman(rt,
                    {"container", "restore", "--import", (images / kPodmanArchiveName).string()},
                    work, "restoring container " + name);
}

Status podman_restore_kept(const ContainerRuntime& rt, const std::string& name,
                           const fs::path& work) {
  return run_podman(rt, {"container", "restore", name}, work, "restoring container " + name);
}

Status podman_remove(const ContainerRuntime& rt, const std::string& name, const fs::path& work) {
  return run_podman(rt, {"rm", name}, work, "removing the checkpointed container " + name);
}

}  // namespace gcr::gcrd
