// gcrd_link.h: the plugin asks gcrd, over gcrd's own socket (gcrd_protocol.h, verbs criu_dump and
// criu_restore), and keeps the connection to CRIU's end.
#include "gcrd_link.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "gcrd_client.h"
#include "gcrd_protocol.h"
#include "log.h"

namespace gcr::criu_plugin {
namespace {

std::filesystem::path socket_of(const Config& c) {
  // The plugin reads GCR_GCRD_SOCKET itself (config.cpp), never gcr's settings.
  return c.gcrd_socket.empty() ? gcrd::default_socket_path(std::nullopt)
                               : std::filesystem::path(c.gcrd_socket);
}

void send_text(int fd, const std::string& line) {
  for (std::size_t done = 0; done < line.size();) {
    ssize_t n = ::send(fd, line.data() + done, line.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      log_warn("gcrd hung up (%s)", std::strerror(errno));
      return;
    }
    done += static_cast<std::size_t>(n);
  }
}

void log_progress(const std::string& text) {
  if (!gcrd::parse_bytes_progress(text)) log_info("gcrd: %s", text.c_str());
}

Result<std::string> read_file_at(int dir, const char* name) {
  UniqueFd fd(::openat(dir, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return errno_error(std::string("opening ") + name + " in the images directory");
  std::string text;
  char buf[512];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error(std::string("reading ") + name);
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > 4096)
      return make_error(Errc::corrupt_image, std::string(name) + " is too long");
  }
  return text;
}

Status write_file_at(int dir, const char* name, const std::string& text) {
  UniqueFd fd(::openat(dir, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return errno_error(std::string("creating ") + name + " in the images directory");
  if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()) ||
      ::fsync(fd.get()) != 0)
    return errno_error(std::string("writing ") + name + " in the images directory");
  return ok();
}

}  // namespace

Result<std::optional<GcrdLink>> GcrdLink::begin_dump(const Config& config, int pid,
                                                     int images_dir) {
  if (!config.use_gcrd) return std::optional<GcrdLink>();
  const auto socket = socket_of(config);
  auto fd = gcrd::connect_running(socket);
  if (!fd) {
    log_info("gcrd does not answer at %s (%s): CUDA processes get the driver's checkpoint only",
             socket.c_str(), fd.error().message.c_str());
    return std::optional<GcrdLink>();
  }
  UniqueFd conn(*fd);
  if (images_dir < 0)  // before gcrd parks anything
    return make_error(Errc::unsupported,
                      "this CRIU does not give plugins the images directory, where gcr must leave "
                      "the reference to the device memory; set gcrd = off in gcr.conf for the "
                      "driver's checkpoint alone");
  std::map<std::string, std::string> fields{{"pid", std::to_string(pid)}};
  // gcrd works inside CRIU's --timeout alarm (armed around the seize): half of what is left for
  // the quiesce, the store and the driver's lock share the rest.
  itimerval left{};
  if (::getitimer(ITIMER_REAL, &left) == 0 && (left.it_value.tv_sec || left.it_value.tv_usec)) {
    long long ms = left.it_value.tv_sec * 1000ll + left.it_value.tv_usec / 1000;
    fields["timeout_ms"] = std::to_string(std::max(100ll, ms / 2));
  }
  if (config.self_contained)
    fields["self_contained"] = "1";
  else if (!config.store.empty())
    fields["store"] = config.store;
  std::vector<int> files;
  if (config.self_contained) files.push_back(images_dir);
  auto reply = gcrd::call(conn.get(), "criu_dump", fields, log_progress, files);
  if (!reply) return std::move(reply).context("gcrd, parking the device memory").error();
  if (reply->count("kind") && reply->at("kind") == "none") {
    log_info("no process of the tree of %d runs under gcr: the driver's checkpoint only", pid);
    return std::optional<GcrdLink>();
  }
  std::string id = reply->count("id") ? reply->at("id") : "";
  ImagesReference ref{id, config.self_contained ? "images" : config.store};
  if (images_dir >= 0) {
    GCR_TRY(write_file_at(images_dir, gcrd::kImagesReferenceName, encode_reference(ref)));
  } else {
    return make_error(Errc::unsupported,
                      "this CRIU does not give plugins the images directory, where the reference "
                      "to checkpoint " +
                          id + " must go");
  }
  log_info("gcrd parked and stored the device memory as checkpoint %s%s", id.c_str(),
           config.self_contained ? " (inside the images directory)" : "");
  return std::optional<GcrdLink>(GcrdLink(std::move(conn), id));
}

Result<std::optional<GcrdLink>> GcrdLink::begin_restore(const Config& config, int images_dir) {
  if (images_dir < 0) return std::optional<GcrdLink>();
  auto text = read_file_at(images_dir, gcrd::kImagesReferenceName);
  if (!text) {
    if (text.error().code == Errc::not_found) return std::optional<GcrdLink>();
    return std::move(text).error();
  }
  GCR_TRY_ASSIGN(ImagesReference ref, decode_reference(*text));
  const bool self_contained = ref.store == "images";
  const auto socket = socket_of(config);
  auto fd = gcrd::connect_running(socket);
  if (!fd)
    return make_error(
        fd.error().code,
        "the image's device memory is checkpoint " + ref.id + " of gcrd's " +
            (self_contained
                 ? std::string("store in the images directory")
                 : "store " + (ref.store.empty() ? std::string("(its default)") : ref.store)) +
            ", and gcrd does not answer at " + socket.string() + " (" + fd.error().message +
            "); start it (gcr daemon) and restore again");
  UniqueFd conn(*fd);
  std::map<std::string, std::string> fields{{"name", ref.id}};
  std::vector<int> files;
  if (self_contained) {
    fields["self_contained"] = "1";
    files.push_back(images_dir);
  } else if (!ref.store.empty()) {
    fields["store"] = ref.store;
  }
  if (!config.device_map_text.empty()) fields["device_map"] = config.device_map_text;
  auto reply = gcrd::call(conn.get(), "criu_restore", fields, log_progress, files);
  if (!reply)
    return std::move(reply)
        .context("gcrd, preparing the device memory of checkpoint " + ref.id)
        .error();
  log_info("gcrd holds the device memory of checkpoint %s and loads it", ref.id.c_str());
  return std::optional<GcrdLink>(GcrdLink(std::move(conn), ref.id));
}

void GcrdLink::restored(int pid) {
  send_text(fd_.get(), "restored pid=" + std::to_string(pid) + "\n");
}

void GcrdLink::finish(int ret, std::optional<int> root) {
  // The restored tree's root: a job's members are found under it, whether it uses CUDA or not.
  if (root) send_text(fd_.get(), "root pid=" + std::to_string(*root) + "\n");
  send_text(fd_.get(), "result ret=" + std::to_string(ret) + "\n");
  fd_.reset();
}

}  // namespace gcr::criu_plugin
