// container_host.h: a container restored for gcr migrate --container's source.
#include "container_host.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>

#include "container_runtime.h"
#include "gcr/criu_creds.h"
#include "gcr/settings.h"
#include "gcr/store.h"
#include "gcr/trusted_path.h"
#include "images_archive.h"
#include "podman_import.h"
#include "work_dir.h"

namespace gcr::gcrd {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// CRIU's images of one container: far less than this with its device memory parked; a process
// with GBs of host memory sends them all.
constexpr std::uint64_t kImagesLimit = 256ull << 30;

std::string ns_since(Clock::time_point t) {
  return std::to_string(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count());
}

// The driver this gcrd runs on, for the plugin in the runtime's CRIU: GCR_REAL_LIBCUDA when gcr
// started gcrd, else the library that holds the cuInit gcrd resolved.
std::string own_driver() {
  if (auto d = path_for_root("GCR_REAL_LIBCUDA", settings().real_libcuda)) return d->string();
  Dl_info info{};
  void* sym = ::dlsym(RTLD_DEFAULT, "cuInit");
  if (sym && ::dladdr(sym, &info) && info.dli_fname && info.dli_fname[0] == '/')
    return info.dli_fname;
  return "";
}

// Whether this gcrd restores container `name` for a peer (Note [Containers restored for a network
// peer]); a request without its store (a local one: the network's always has one) is refused too.
Status check_container(const ContainerHost& host, const std::map<std::string, std::string>& f,
                       const std::string& name, RuntimeKind kind) {
  if (host.bundles.empty())
    return Error{Errc::permission_denied,
                 "this gcrd restores no containers for other hosts; its operator starts it with "
                 "--containers DIR, DIR/NAME being the bundle of each container it accepts"};
  if (!valid_container_name(name))
    return Error{Errc::invalid_argument, "'" + name + "' is not a container name"};
  if (!f.count("store") || f.at("store").empty())
    return Error{Errc::invalid_argument, "restore_container names no store"};
  std::error_code ec;
  const fs::path bundle = host.bundles / name;
  if (kind == RuntimeKind::podman) {
    // Note [podman archives restored for a network peer]: the operator's word for this container.
    if (!fs::is_regular_file(bundle / "podman.conf", ec))
      return Error{Errc::not_found, "no " + (bundle / "podman.conf").string() +
                                        " here: this host's operator "
                                        "allows podman container '" +
                                        name +
                                        "' by writing it (image = REF, mount = "
                                        "PATH for each host path it binds)"};
    return ok();
  }
  if (!fs::is_regular_file(bundle / "config.json", ec))
    return Error{Errc::not_found, "no bundle for container '" + name + "' here (" +
                                      bundle.string() +
                                      "/config.json): this host's operator prepares it, with the "
                                      "root file system the container expects"};
  return ok();
}

// The runtime of a request of `kind`: --runtime when it is of that kind, else runc or podman in
// PATH.
Result<fs::path> runtime_binary(const ContainerHost& host, RuntimeKind kind) {
  if (kind == RuntimeKind::runc) return find_container_runtime(host.runtime);
  if (!host.runtime.empty()) {
    GCR_TRY_ASSIGN(fs::path given, find_container_runtime(host.runtime));
    if (auto k = container_runtime_kind(given); k && *k == RuntimeKind::podman) return given;
  }
  return find_container_runtime("podman");
}

// Before podman imports the archive in `images` (Note [podman archives restored for a network
// peer]): checks it, has its processes' uids checked, and names this host's checkpoint in it.
Status prepare_podman(const ContainerHost& host, const std::string& name, const fs::path& images,
                      const fs::path& work, const std::string& reference,
                      const std::set<uid_t>& peer_uids) {
  GCR_TRY_ASSIGN(PodmanAllowance allowed,
                 read_podman_allowance(host.bundles / name / "podman.conf"));
  const fs::path core = work / "core", archive = images / kPodmanArchiveName;
  if (::mkdir(core.c_str(), 0700) != 0) return errno_error("creating " + core.string());
  GCR_TRY(prepare_podman_archive(archive, name, allowed, reference, core, work / "rewritten.tar"));
  GCR_TRY_ASSIGN(auto creds, criu::read_image_creds(core));
  GCR_TRY(criu::check_peer_may_run(creds, peer_uids).context("container " + name));
  std::error_code ec;
  fs::rename(work / "rewritten.tar", archive, ec);
  if (ec) return Error{Errc::io_error, "replacing " + archive.string() + ": " + ec.message()};
  return ok();
}

// Before runc restores the images: its processes' uids checked, this host's checkpoint named.
Status prepare_runc(const std::string& name, const fs::path& images, const std::string& reference,
                    const std::set<uid_t>& peer_uids) {
  // Note [Who a peer may run]: who the container's processes would be, before runc runs them.
  GCR_TRY_ASSIGN(auto creds, criu::read_image_creds(images));
  GCR_TRY(criu::check_peer_may_run(creds, peer_uids).context("container " + name));
  std::ofstream ref(images / kImagesReferenceName, std::ios::trunc);
  ref << reference;
  if (!ref.flush())
    return Error{Errc::io_error, "writing " + (images / kImagesReferenceName).string()};
  return ok();
}

}  // namespace

Result<std::map<std::string, std::string>> restore_container_here(
    const ContainerHost& host, const std::set<uid_t>& peer_uids, const criu::Tools& tools,
    store::Store& st, const std::map<std::string, std::string>& f, int client_fd,
    const Progress& progress) {
  // What is refused is refused before anything touches disk: the images are then read and
  // dropped (a peer still sending would otherwise have its connection reset, and never read why).
  const std::string name = f.count("name") ? f.at("name") : "";
  const std::string id = f.count("id") ? f.at("id") : "";
  auto kind = parse_runtime_kind(f.count("runtime") ? f.at("runtime") : "runc");
  Status refused = kind ? check_container(host, f, name, *kind) : Status(kind.error());
  if (!refused) {
    (void)receive_images(client_fd, -1, kImagesLimit);
    return std::move(refused).error();
  }
  const fs::path bundle = host.bundles / name;
  auto t_receive = Clock::now();
  GCR_TRY_ASSIGN(WorkDir work, WorkDir::create("container"));
  const fs::path images = work.path() / "images";
  if (::mkdirat(work.fd(), "images", 0700) != 0) return errno_error("creating " + images.string());
  UniqueFd images_fd(
      ::openat(work.fd(), "images", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (!images_fd) return errno_error("opening " + images.string());
  GCR_TRY_ASSIGN(ImagesSent got, receive_images(client_fd, images_fd.get(), kImagesLimit)
                                     .context("receiving the container's images"));
  const std::string receive_ns = ns_since(t_receive);
  GCR_TRY_ASSIGN(store::CheckpointId cid,
                 st.resolve(id).context("the container's device memory in this host's store"));
  // The store the request was served from (a local request may name none: gcrd's default). The
  // reference names this host's checkpoint and store, whatever the source's said.
  const std::string store_root = st.options().root.string();
  const std::string reference = encode_reference({cid.hex(), store_root});
  if (*kind == RuntimeKind::podman) {
    GCR_TRY(prepare_podman(host, name, images, work.path(), reference, peer_uids));
  } else {
    GCR_TRY(prepare_runc(name, images, reference, peer_uids));
  }
  GCR_TRY_ASSIGN(fs::path binary, runtime_binary(host, *kind));
  ContainerRuntime rt{binary, tools.criu, tools.plugin_dir, host.socket, store_root, own_driver()};
  rt.kind = *kind;
  progress("restoring container " + name + " with " + rt.binary.filename().string() + " (" +
           std::to_string(got.bytes >> 10) + " KiB of the runtime's checkpoint)");
  auto t_restore = Clock::now();
  GCR_TRY(restore_container(rt, name, bundle, images, work.path()));
  const std::string restore_ns = ns_since(t_restore);
  std::map<std::string, std::string> out;
  if (auto s = container_state(rt, name)) out["pid"] = std::to_string(s->pid);
  out["container"] = name;
  out["runtime"] = runtime_kind_name(rt.kind);
  out["id"] = cid.hex();
  out["images_bytes"] = std::to_string(got.bytes);
  out["time.receive_ns"] = receive_ns;
  out["time.restore_ns"] = restore_ns;
  return out;
}

}  // namespace gcr::gcrd
