// podman_import.h: what gcrd checks in a peer's podman archive before podman imports it.
#include "podman_import.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "gcr/json_read.h"
#include "gcr/unique_fd.h"
#include "gcrd_protocol.h"
#include "tar_members.h"

namespace gcr::gcrd {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kConfigLimit = 16 << 20;  // config.dump and spec.dump: ~25 KiB each
constexpr std::uint64_t kCoreLimit = 16 << 20;    // a CRIU core image: a few KiB

// podman 4's default capabilities (containers.conf).
const std::set<std::string> kDefaultCapabilities{
    "CAP_CHOWN",   "CAP_DAC_OVERRIDE",     "CAP_FOWNER",    "CAP_FSETID",
    "CAP_KILL",    "CAP_NET_BIND_SERVICE", "CAP_SETFCAP",   "CAP_SETGID",
    "CAP_SETPCAP", "CAP_SETUID",           "CAP_SYS_CHROOT"};

std::string text_of(const JsonValue* v) {
  return v && v->is_string() ? v->text : "";
}

// `path` is `dir` or below it, component by component.
bool within(const fs::path& path, const fs::path& dir) {
  auto p = path.lexically_normal(), d = dir.lexically_normal();
  auto [a, b] = std::mismatch(d.begin(), d.end(), p.begin(), p.end());
  return a == d.end() || (std::next(a) == d.end() && a->empty());
}

// podman's own files of the container, bound from its storage (made anew on import).
bool podmans_own_file(const std::string& destination, const fs::path& source) {
  static const std::set<std::string> kOwn{"/etc/hosts", "/etc/hostname", "/etc/resolv.conf",
                                          "/run/.containerenv", "/dev/shm"};
  if (!kOwn.count(destination)) return false;
  const std::string s = source.lexically_normal().string();
  const std::string base = fs::path(destination).filename().string();
  return s.find("/userdata/") != std::string::npos && source.filename().string() == base &&
         s.find("..") == std::string::npos;
}

Status check_mounts(const JsonValue& spec, const PodmanAllowance& allowed) {
  const JsonValue* mounts = spec.get("mounts");
  if (!mounts) return ok();
  for (const JsonValue& m : mounts->items) {
    const std::string type = text_of(m.get("type")), source = text_of(m.get("source")),
                      destination = text_of(m.get("destination"));
    bool bind = type == "bind";
    if (const JsonValue* options = m.get("options"))
      for (const JsonValue& o : options->items) bind |= o.text == "bind" || o.text == "rbind";
    if (!bind || podmans_own_file(destination, source)) continue;
    const bool listed = std::any_of(allowed.mounts.begin(), allowed.mounts.end(),
                                    [&](const std::string& a) { return within(source, a); });
    if (!listed)
      return Error{Errc::permission_denied, "it bind-mounts the host's " + source + " (at " +
                                                destination + "), which podman.conf does not list"};
  }
  return ok();
}

Status check_linux(const JsonValue& spec, const PodmanAllowance& allowed) {
  const JsonValue* linux = spec.get("linux");
  std::set<std::string> own;
  if (linux && linux->get("namespaces"))
    for (const JsonValue& ns : linux->get("namespaces")->items) {
      const std::string type = text_of(ns.get("type")), path = text_of(ns.get("path"));
      if (path.empty() || (type == "network" && within(path, "/run/netns"))) own.insert(type);
    }
  for (const char* type : {"pid", "mount", "ipc", "uts", "network"})
    if (!own.count(type))
      return Error{Errc::permission_denied,
                   std::string("it has no ") + type + " namespace of its own"};
  if (linux && linux->get("devices"))
    for (const JsonValue& d : linux->get("devices")->items) {
      const std::string path = text_of(d.get("path"));
      if (std::find(allowed.devices.begin(), allowed.devices.end(), path) == allowed.devices.end())
        return Error{Errc::permission_denied,
                     "it has the device " + path + ", which podman.conf does not list"};
    }
  return ok();
}

Status check_process(const JsonValue& spec, const PodmanAllowance& allowed) {
  if (const JsonValue* hooks = spec.get("hooks"))
    for (const auto& [when, list] : hooks->members)
      if (!list.items.empty())
        return Error{Errc::permission_denied, "it has OCI hooks (" + when + ")"};
  const JsonValue* process = spec.get("process");
  const JsonValue* caps = process ? process->get("capabilities") : nullptr;
  if (!caps) return ok();
  for (const auto& [set, list] : caps->members)
    for (const JsonValue& c : list.items)
      if (!kDefaultCapabilities.count(c.text) &&
          std::find(allowed.capabilities.begin(), allowed.capabilities.end(), c.text) ==
              allowed.capabilities.end())
        return Error{Errc::permission_denied, "it has the capability " + c.text + " (" + set +
                                                  "), which podman.conf does not list"};
  return ok();
}

Status check_config(const JsonValue& config, const std::string& name,
                    const PodmanAllowance& allowed) {
  if (text_of(config.get("name")) != name)
    return Error{Errc::permission_denied,
                 "it is the container '" + text_of(config.get("name")) + "', not '" + name + "'"};
  const std::string image = text_of(config.get("rootfsImageName"));
  if (std::find(allowed.images.begin(), allowed.images.end(), image) == allowed.images.end())
    return Error{Errc::permission_denied,
                 "it runs the image '" + image + "', which podman.conf does not list"};
  if (const JsonValue* p = config.get("privileged"); p && p->boolean)
    return Error{Errc::permission_denied, "it is privileged"};
  // A volume is named, and the name would be resolved here: another container's data.
  for (const char* key : {"namedVolumes", "overlayVolumes", "imageVolumes"})
    if (const JsonValue* v = config.get(key); v && !v->items.empty())
      return Error{Errc::permission_denied,
                   std::string("it uses podman volumes (") + key +
                       "), which this host does not take from a peer; bind a host path instead"};
  return ok();
}

Result<JsonValue> member_json(int fd, const std::vector<TarMember>& members,
                              const std::string& name) {
  auto m = std::find_if(members.begin(), members.end(),
                        [&](const TarMember& t) { return t.name == name; });
  if (m == members.end())
    return Error{Errc::corrupt_image, "the archive has no " + name + " (not podman's export?)"};
  GCR_TRY_ASSIGN(std::string text, read_tar_member(fd, *m, kConfigLimit));
  return json_parse(text).context(name);
}

// CRIU's core images (checkpoint/core-N.img) into `dir`, for the uid check.
Status write_core_images(int fd, const std::vector<TarMember>& members, const fs::path& dir) {
  UniqueFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (!dfd) return errno_error("opening " + dir.string());
  for (const TarMember& m : members) {
    const fs::path p(m.name);
    const std::string base = p.filename().string();
    if (m.directory || p.parent_path() != "checkpoint" || !base.starts_with("core-") ||
        !base.ends_with(".img"))
      continue;
    GCR_TRY_ASSIGN(std::string data, read_tar_member(fd, m, kCoreLimit));
    UniqueFd out(::openat(dfd.get(), base.c_str(),
                          O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!out || ::write(out.get(), data.data(), data.size()) != static_cast<ssize_t>(data.size()))
      return errno_error("writing " + (dir / base).string());
  }
  return ok();
}

}  // namespace

Result<PodmanAllowance> read_podman_allowance(const fs::path& file) {
  std::ifstream in(file);
  if (!in)
    return Error{Errc::not_found,
                 "no " + file.string() +
                     ": this host's operator allows a podman container by writing it (image = "
                     "REF, and mount = PATH for each host path it binds; docs/containers.md)"};
  PodmanAllowance a;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    line = line.substr(0, line.find('#'));
    auto eq = line.find('=');
    auto trim = [](std::string s) {
      s.erase(0, s.find_first_not_of(" \t"));
      s.erase(s.find_last_not_of(" \t\r") + 1);
      return s;
    };
    if (trim(line).empty()) continue;
    const std::string key = trim(line.substr(0, eq)),
                      value = eq == std::string::npos ? "" : trim(line.substr(eq + 1));
    if (value.empty() ||
        (key != "image" && key != "mount" && key != "capability" && key != "device"))
      return Error{Errc::invalid_argument, file.string() + ":" + std::to_string(n) +
                                               ": expected image, mount, capability or device = "
                                               "VALUE"};
    (key == "image"        ? a.images
     : key == "mount"      ? a.mounts
     : key == "capability" ? a.capabilities
                           : a.devices)
        .push_back(value);
  }
  if (a.images.empty())
    return Error{Errc::invalid_argument, file.string() + " names no image (image = REF)"};
  return a;
}

Status prepare_podman_archive(const fs::path& archive, const std::string& name,
                              const PodmanAllowance& allowed, const std::string& reference,
                              const fs::path& core_dir, const fs::path& rewritten) {
  UniqueFd fd(::open(archive.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return errno_error("opening " + archive.string());
  GCR_TRY_ASSIGN(std::vector<TarMember> members, list_tar_members(fd.get()));
  GCR_TRY_ASSIGN(JsonValue config, member_json(fd.get(), members, "config.dump"));
  GCR_TRY_ASSIGN(JsonValue spec, member_json(fd.get(), members, "spec.dump"));
  Status allowed_here = check_config(config, name, allowed);
  if (allowed_here) allowed_here = check_process(spec, allowed);
  if (allowed_here) allowed_here = check_linux(spec, allowed);
  if (allowed_here) allowed_here = check_mounts(spec, allowed);
  if (!allowed_here)
    return std::move(allowed_here)
        .context("this host does not import the podman archive of container " + name)
        .error();
  GCR_TRY(write_core_images(fd.get(), members, core_dir));
  UniqueFd out(
      ::open(rewritten.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!out) return errno_error("creating " + rewritten.string());
  return copy_tar_replacing(fd.get(), out.get(), std::string("checkpoint/") + kImagesReferenceName,
                            reference);
}

}  // namespace gcr::gcrd
