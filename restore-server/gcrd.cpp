// gcrd: gcr's daemon. It keeps a warm CUDA context per device, runs the checkpoint and restore
// protocols (checkpoint.h, restore.h) for the gcr command, and holds processes' parked device
// memory while it does. One thread per client; the store takes concurrent writers.
//
//   gcrd [--socket PATH] [--detach]      (normally started by `gcr`, or `gcr daemon`)
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "checkpoint.h"
#include "container_host.h"
#include "device.h"
#include "gcr/criu.h"
#include "gcr/private_dir.h"
#include "gcr/process_tree.h"
#include "gcr/unique_fd.h"
#include "gcrd_client.h"
#include "gcrd_protocol.h"
#include "net_store.h"
#include "pause_point.h"
#include "restore.h"
#include "staged.h"
#include "work_registry.h"

namespace fs = std::filesystem;
using namespace gcr;
using namespace gcr::gcrd;

namespace {

fs::path g_self_dir;
ContainerHost
    g_containers;  // --containers, --runtime (Note [Containers restored for a network peer])
WorkRegistry g_work;  // what gcrd is doing to which process (`gcr ps`)
std::mutex g_log_mu;

void log(const std::string& line) {
  std::lock_guard lock(g_log_mu);
  std::fprintf(stderr, "gcrd: %s\n", line.c_str());
  std::fflush(stderr);
}

bool send_line(int fd, const std::string& line) {
  std::string s = line + "\n";
  for (std::size_t done = 0; done < s.size();) {
    ssize_t n = ::send(fd, s.data() + done, s.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// The request line, and the files the client sent with it (SCM_RIGHTS: a restore's inherited
// stdio and logs, named by the request's inherit.N fields).
std::string read_request(int fd, std::vector<UniqueFd>& files) {
  std::string line;
  char c;
  constexpr std::size_t kMaxFiles = 64;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFiles)];
  while (line.size() < 65536) {
    iovec iov{&c, 1};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    for (cmsghdr* h = CMSG_FIRSTHDR(&msg); h; h = CMSG_NXTHDR(&msg, h))
      if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS) {
        std::size_t count = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t i = 0; i < count; ++i) {
          int received;
          std::memcpy(&received, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
          files.emplace_back(received);
        }
      }
    if (n <= 0 || c == '\n') break;
    line += c;
  }
  return line;
}

// Parking a process hands gcrd one fd per region (and the keeper a copy of each): the default soft
// limit of 1024 would fail a park of a thousand regions.
void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

uid_t owner_of(pid_t pid) {
  struct stat st;
  std::string p = "/proc/" + std::to_string(pid);
  return stat(p.c_str(), &st) == 0 ? st.st_uid : static_cast<uid_t>(-1);
}

fs::path store_root(const std::map<std::string, std::string>& f) {
  auto it = f.find("store");
  return it != f.end() && !it->second.empty() ? fs::path(it->second) : store::Store::default_root();
}

Result<std::shared_ptr<store::Store>> open_store(const std::map<std::string, std::string>& f) {
  store::StoreOptions o;
  o.root = store_root(f);
  // The client resolves locations (gcr/store_location.h) and stages remote stores locally: a
  // relative path here would be resolved in gcrd's directory, a URL taken for a directory "s3:".
  if (!o.root.is_absolute())
    return Error{Errc::invalid_argument,
                 "gcrd opens stores by absolute path only, and got '" + o.root.string() +
                     "'; update the gcr client, which resolves the store location"};
  return store::Store::open(o, true);
}

// A root restore runs CRIU as root on the store's images: a store that anyone but root could have
// written (the client's GCR_STORE under `sudo -E`, say) could hold images that make CRIU restore a
// root process running that user's code. Root, its two levels of entries, nobody else's.
Status check_root_store(const fs::path& root) {
  auto check = [](const fs::path& p) -> Status {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) return errno_error("stat '" + p.string() + "'");
    if (st.st_uid != 0 || (S_ISDIR(st.st_mode) && (st.st_mode & 022)) || S_ISLNK(st.st_mode))
      return Error{Errc::permission_denied,
                   "root restores only from a store that only root can write, and '" + p.string() +
                       "' belongs to uid " + std::to_string(st.st_uid) +
                       (S_ISLNK(st.st_mode) ? " and is a symlink" : "") +
                       ((st.st_mode & 022) ? " and is writable by others" : "") +
                       "; checkpoint into a store only root can write (GCR_STORE), or restore "
                       "as that user with their own gcrd"};
    return ok();
  };
  GCR_TRY(check(root));
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    GCR_TRY(check(e.path()));
    if (e.is_directory(ec) && !e.is_symlink(ec))
      for (const auto& f : fs::directory_iterator(e.path(), ec)) GCR_TRY(check(f.path()));
  }
  return ok();
}

// A line from the plugin on a criu_dump or criu_restore connection; EOF: CRIU is gone.
Result<std::string> read_plugin_line(int fd) {
  std::string line;
  char c;
  for (;;) {
    ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error("reading from gcr's CRIU plugin");
    if (n == 0)
      return Error{Errc::io_error,
                   "the CRIU run by the container runtime ended without saying how its " +
                       std::string(line.empty() ? "" : "(partly sent) ") +
                       "work went (killed? see the runtime's CRIU log)"};
    if (c == '\n') return line;
    line += c;
  }
}

// Whether pid is ancestor's descendant (or ancestor itself).
bool in_tree_of(pid_t ancestor, pid_t pid) {
  auto tree = criu::tree_pids(ancestor);
  return std::find(tree.begin(), tree.end(), pid) != tree.end();
}

// Of the tasks CRIU restored, the one in no other's tree (the root of what CRIU restored under
// gcr).
pid_t topmost_pid(const std::vector<pid_t>& pids) {
  for (pid_t p : pids) {
    bool under_another = false;
    for (pid_t q : pids) under_another |= q != p && in_tree_of(q, p);
    if (!under_another) return p;
  }
  return 0;
}

// "result ret=N": whether the runtime's CRIU succeeded.
Result<bool> read_plugin_result(int fd) {
  GCR_TRY_ASSIGN(std::string line, read_plugin_line(fd));
  if (line.rfind("result ", 0) != 0)
    return Error{Errc::protocol, "gcr's CRIU plugin sent '" + line + "' for a result"};
  auto f = decode_fields(line.substr(7));
  return f.count("ret") && f.at("ret") == "0";
}

// A self-contained container checkpoint keeps its device memory in a store inside the runtime's
// images directory (docs/containers.md), which the plugin sends as file 0.
Result<std::shared_ptr<store::Store>> open_images_store(const std::vector<UniqueFd>& files) {
  if (files.empty())
    return Error{Errc::protocol, "a self-contained request comes with its images directory"};
  store::StoreOptions o;
  o.root = "/proc/self/fd/" + std::to_string(files[0].get()) + "/" + kImagesStoreName;
  return store::Store::open(o, true);
}

Result<std::map<std::string, std::string>> serve(const std::string& verb,
                                                 const std::map<std::string, std::string>& f,
                                                 std::vector<UniqueFd> files, uid_t client_uid,
                                                 int client_fd, const Progress& progress) {
  std::map<std::string, std::string> out;
  if (verb == "ping") {
    out["pid"] = std::to_string(getpid());
    return out;
  }
  if (verb == "work") {  // what gcrd is doing to which process, for `gcr ps`
    for (const auto& [pid, w] : g_work.snapshot()) {
      const std::string key = "pid." + std::to_string(pid) + ".";
      out[key + "operation"] = w.operation;
      out[key + "phase"] = w.phase;
      out[key + "state"] = w.state;
    }
    return out;
  }
  if ((verb == "criu_dump" || verb == "criu_restore") && client_uid != 0)
    return Error{Errc::permission_denied, "only root's CRIU may hand gcrd a dump or a restore"};
  GCR_TRY_ASSIGN(criu::Tools tools, criu::find_tools(g_self_dir));
  const bool self_contained = f.count("self_contained") && f.at("self_contained") == "1";
  GCR_TRY_ASSIGN(auto st, self_contained ? open_images_store(files) : open_store(f));
  if (verb == "criu_dump") {
    // Note [CRIU run by someone else] (checkpoint.h): the plugin's first PAUSE_DEVICES.
    CheckpointRequest req;
    req.pid = f.count("pid") ? std::atoi(f.at("pid").c_str()) : 0;
    if (f.count("timeout_ms"))
      req.quiesce_timeout = std::chrono::milliseconds(
          std::clamp(std::atoll(f.at("timeout_ms").c_str()), 100ll, 3'600'000ll));
    if (client_uid != 0)
      return Error{Errc::permission_denied, "only root's CRIU may hand gcrd a dump"};
    req.external_criu = [client_fd](const std::string& id) -> Result<bool> {
      if (!send_line(client_fd, "ok " + encode_fields({{"id", id}})))
        return Error{Errc::io_error, "gcr's CRIU plugin hung up before its dump"};
      return read_plugin_result(client_fd);
    };
    GCR_TRY_ASSIGN(CheckpointReport rep, checkpoint_process(*st, tools, req, progress, &g_work));
    if (rep.kind == "none") {
      out["kind"] = "none";  // not under gcr: the plugin's driver steps alone
      return out;
    }
    out["id"] = rep.id;
    out["kept_running"] = rep.kept_running ? "1" : "0";
    out["dirty_bytes"] = std::to_string(rep.dirty_bytes);
    return out;  // the plugin has gone: this reply is for gcrd's log
  }
  if (verb == "criu_restore") {
    if (client_uid != 0)
      return Error{Errc::permission_denied, "only root's CRIU may ask gcrd for a restore"};
    RestoreRequest req;
    req.name = f.count("name") ? f.at("name") : "";
    if (f.count("device_map") && !f.at("device_map").empty()) {
      GCR_TRY_ASSIGN(req.device_map, parse_device_map(f.at("device_map")));
    }
    req.external_criu = [client_fd]() -> Result<pid_t> {
      if (!send_line(client_fd, "ok"))
        return Error{Errc::io_error, "gcr's CRIU plugin hung up before the restore"};
      // "restored pid=P" for each CUDA task, then "result ret=N".
      std::vector<pid_t> pids;
      pid_t root = 0;
      for (;;) {
        GCR_TRY_ASSIGN(std::string line, read_plugin_line(client_fd));
        if (line.rfind("root ", 0) == 0) {
          auto rf = decode_fields(line.substr(5));
          if (rf.count("pid")) root = std::atoi(rf.at("pid").c_str());
          continue;
        }
        if (line.rfind("restored ", 0) == 0) {
          auto rf = decode_fields(line.substr(9));
          if (rf.count("pid")) pids.push_back(std::atoi(rf.at("pid").c_str()));
          continue;
        }
        if (line.rfind("result ", 0) != 0)
          return Error{Errc::protocol, "gcr's CRIU plugin sent '" + line + "'"};
        auto rf = decode_fields(line.substr(7));
        if (!rf.count("ret") || rf.at("ret") != "0")
          return Error{Errc::io_error, "the runtime's CRIU failed to restore (see its log)"};
        break;
      }
      // A root the plugin names must hold the tasks it restored (else: the topmost of those).
      if (root > 0 && !pids.empty() && in_tree_of(root, pids[0])) return root;
      if (pid_t top = topmost_pid(pids)) return top;
      return Error{Errc::not_found,
                   "the runtime's CRIU restored no CUDA task that gcr's plugin saw; the device "
                   "memory of checkpoint has nowhere to go"};
    };
    if (geteuid() == 0 && !self_contained) GCR_TRY(check_root_store(store_root(f)));
    GCR_TRY_ASSIGN(RestoreReport rep, restore_checkpoint(*st, tools, req, progress));
    out["id"] = rep.id;
    out["pid"] = std::to_string(rep.pid);
    return out;
  }
  if (verb == "restore_container")  // Note [Containers restored for a network peer]
    return restore_container_here(g_containers, tools, *st, f, client_fd, progress);
  if (verb == "stage") {  // Note [Staged restore]
    pause_point("stage");
    GCR_TRY_ASSIGN(std::uint64_t loaded,
                   stage_checkpoint(*st, f.count("name") ? f.at("name") : "", progress));
    out["loaded_bytes"] = std::to_string(loaded);
    return out;
  }
  if (verb == "checkpoint") {
    CheckpointRequest req;
    req.pid = f.count("pid") ? std::atoi(f.at("pid").c_str()) : 0;
    if (f.count("tag") && !f.at("tag").empty()) req.tag = f.at("tag");
    req.leave_running = f.count("leave_running") && f.at("leave_running") == "1";
    req.stop_copy = f.count("stop_copy") && f.at("stop_copy") == "1";
    req.tcp_close = f.count("tcp_close") && f.at("tcp_close") == "1";
    if (f.count("timeout_ms")) {
      long long ms = std::atoll(f.at("timeout_ms").c_str());
      if (ms < 100 || ms > 3'600'000)
        return Error{Errc::invalid_argument,
                     "timeout_ms " + f.at("timeout_ms") + " is outside 100 .. 3600000"};
      req.quiesce_timeout = std::chrono::milliseconds(ms);
    }
    if (f.count("job_pids")) {  // Note [A job of several trees] (job.h)
      std::istringstream list(f.at("job_pids"));
      for (std::string p; std::getline(list, p, ',');) {
        pid_t pid = std::atoi(p.c_str());
        if (pid <= 0 || std::to_string(pid) != p)
          return Error{Errc::invalid_argument, "job_pids: '" + p + "' is not a pid"};
        if (pid == req.pid ||
            std::find(req.job_pids.begin(), req.job_pids.end(), pid) != req.job_pids.end())
          return Error{Errc::invalid_argument, "process " + p + " is named twice"};
        req.job_pids.push_back(pid);
      }
    }
    for (pid_t pid : req.job_pids)
      if (client_uid != 0 && owner_of(pid) != client_uid)
        return Error{Errc::permission_denied,
                     "process " + std::to_string(pid) +
                         " is not yours; only root or its owner may checkpoint it"};
    if (client_uid != 0 && owner_of(req.pid) != client_uid)
      return Error{Errc::permission_denied,
                   "process " + std::to_string(req.pid) +
                       " is not yours; only root or its owner may checkpoint it"};
    if (f.count("device_only") && f.at("device_only") == "1") {
      if (!req.leave_running || req.stop_copy || f.count("hold"))
        return Error{Errc::invalid_argument, "device_only is for a --leave-running checkpoint"};
      req.device_only = true;
    }
    if (f.count("hold") && f.at("hold") == "1") {
      if (req.leave_running || req.stop_copy)
        return Error{Errc::invalid_argument, "hold is for a checkpoint that stops the process"};
      // Note [Migration] (cli/cmd_migrate.cpp): "commit" hands the process to the destination;
      // from then on a client that goes away ends it, before then it runs on.
      req.hold = [client_fd](const std::string& id, const std::function<void()>& on_commit) {
        if (!send_line(client_fd, "ok " + encode_fields({{"held", "1"}, {"id", id}}))) return false;
        bool committed = false;
        for (;;) {
          auto line = read_plugin_line(client_fd);
          if (!line) return committed;
          if (*line == "commit" && !committed) {
            committed = true;
            on_commit();
          }
          if (*line == "end") return true;
          if (*line == "resume") return false;
        }
      };
    }
    GCR_TRY_ASSIGN(CheckpointReport rep, checkpoint_process(*st, tools, req, progress, &g_work));
    out["id"] = rep.id;
    out["kind"] = rep.kind;
    out["pid"] = std::to_string(rep.pid);
    out["regions"] = std::to_string(rep.regions);
    out["region_bytes"] = std::to_string(rep.region_bytes);
    out["dirty_bytes"] = std::to_string(rep.dirty_bytes);
    out["cow_copies"] = std::to_string(rep.cow_copies);
    out["cow_waits"] = std::to_string(rep.cow_waits);
    out["host_tracked_tasks"] = std::to_string(rep.host_tracked_tasks);
    out["host_pages_from_process"] = std::to_string(rep.host_pages_from_process);
    out["host_pages_from_parent"] = std::to_string(rep.host_pages_from_parent);
    out["host_pages_pinned"] = std::to_string(rep.host_pages_pinned);
    out["host_pinned_touched_bytes"] = std::to_string(rep.host_pinned_touched_bytes);
    out["host_pages_saved"] = std::to_string(rep.host_pages_saved);
    out["host_pages_dma_frozen"] = std::to_string(rep.host_pages_dma_frozen);
    out["processes"] = std::to_string(rep.processes);
    out["shared_regions"] = std::to_string(rep.shared_regions);
    out["images_in"] = rep.images_in;
    for (std::size_t i = 0; i < rep.warnings.size(); ++i)
      out["warning" + (i ? "." + std::to_string(i) : std::string())] = rep.warnings[i];
    for (const auto& [k, v] : rep.times_ns) out["time." + k + "_ns"] = std::to_string(v);
    for (const auto& [k, v] : rep.starts_ns) out["start." + k + "_ns"] = std::to_string(v);
    for (const auto& [k, v] : rep.stats) out["stat." + k] = std::to_string(v);
    return out;
  }
  if (verb == "restore") {
    RestoreRequest req;
    req.name = f.count("name") ? f.at("name") : "";
    if (f.count("device") && !f.at("device").empty())
      req.device = std::atoi(f.at("device").c_str());
    if (f.count("device_map") && !f.at("device_map").empty()) {
      GCR_TRY_ASSIGN(req.device_map, parse_device_map(f.at("device_map")));
    }
    req.eager = f.count("eager") && f.at("eager") == "1";
    req.arriving = f.count("arriving") && f.at("arriving") == "1";
    req.new_pid_namespace = f.count("new_pid_namespace") && f.at("new_pid_namespace") == "1";
    for (std::size_t i = 0; i < files.size(); ++i) {
      auto key = f.find("inherit." + std::to_string(i));
      if (key == f.end() || key->second.empty())
        return Error{Errc::protocol, "the client sent file " + std::to_string(i) +
                                         " without an inherit." + std::to_string(i) + " key"};
      if (fcntl(files[i].get(), F_GETFL) & O_PATH)
        return Error{Errc::invalid_argument, "file " + std::to_string(i) + " for " + key->second +
                                                 " is an O_PATH descriptor: send an open file"};
      req.inherit.push_back({key->second, std::move(files[i])});
    }
    req.client_uid = client_uid;
    if (geteuid() == 0) GCR_TRY(check_root_store(store_root(f)));
    GCR_TRY_ASSIGN(RestoreReport rep, restore_checkpoint(*st, tools, req, progress));
    out["id"] = rep.id;
    out["kind"] = rep.kind;
    out["pid"] = std::to_string(rep.pid);
    out["region_bytes"] = std::to_string(rep.region_bytes);
    out["wanted_regions"] = std::to_string(rep.wanted_regions);
    out["original_pid"] = std::to_string(rep.original_pid);
    for (pid_t p : rep.tree_pids)  // Note [A job of several trees] (job.h)
      out["job_pids"] += (out["job_pids"].empty() ? "" : ",") + std::to_string(p);
    out["store_read_bytes"] = std::to_string(rep.store_read_bytes);
    out["shared_bytes"] = std::to_string(rep.shared_bytes);
    out["staged_bytes"] = std::to_string(rep.staged_bytes);
    out["new_pid_namespace"] = rep.new_pid_namespace ? "1" : "0";
    out["mode"] = req.eager ? "eager" : "on-demand";
    out["host_memory"] = rep.lazy_host ? "lazy" : "eager";
    out["host_source"] = rep.host_from_store ? "store" : "images";
    out["host_served_bytes"] = std::to_string(rep.host_served_bytes);
    for (const auto& [k, v] : rep.times_ns) out["time." + k + "_ns"] = std::to_string(v);
    for (const auto& [k, v] : rep.starts_ns) out["start." + k + "_ns"] = std::to_string(v);
    return out;
  }
  return Error{Errc::invalid_argument, "unknown request '" + verb + "'"};
}

// One gcrd/1 request on fd from a client of uid `client_uid`. From the network (Note [Network
// trust] in net_store.h): ping and restore only, on the served store whatever the request says.
void handle_request(const UniqueFd& fd, uid_t client_uid,
                    const std::optional<fs::path>& network_store) {
  ucred cred{};
  cred.uid = client_uid;
  std::vector<UniqueFd> files;
  std::string line = read_request(fd.get(), files);
  std::string proto, verb, rest;
  auto sp1 = line.find(' ');
  proto = line.substr(0, sp1);
  if (proto != kProtocol) {
    send_line(fd.get(), "error " + std::to_string(static_cast<int>(Errc::unsupported)) + " " +
                            encode_value("gcrd speaks " + std::string(kProtocol) +
                                         ", the client sent '" + proto + "'"));
    return;
  }
  auto sp2 = sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
  verb = line.substr(sp1 + 1, sp2 == std::string::npos ? std::string::npos : sp2 - sp1 - 1);
  if (sp2 != std::string::npos) rest = line.substr(sp2 + 1);
  int cfd = fd.get();
  auto progress = [cfd](const std::string& text) {
    send_line(cfd, "progress " + encode_value(text));
  };
  auto fields = decode_fields(rest);
  if (network_store) {
    if (verb != "ping" && verb != "restore" && verb != "stage" && verb != "restore_container") {
      send_line(cfd, "error " + std::to_string(static_cast<int>(Errc::permission_denied)) + " " +
                         encode_value("over the network gcrd serves ping, stage, restore and "
                                      "restore_container only"));
      return;
    }
    fields["store"] = network_store->string();
  }
  log(std::string("request from ") +
      (network_store ? "the network" : "uid " + std::to_string(cred.uid)) + ": " + verb + " " +
      rest);
  const bool quick = verb == "ping" || verb == "stage" || verb == "work";
  if (!quick) pause_point("request");
  auto result = serve(verb, fields, std::move(files), cred.uid, cfd, progress);
  if (!quick) pause_point("reply");
  if (result) {
    send_line(cfd, "ok " + encode_fields(*result));
  } else {
    log(verb + " failed: " + result.error().message);
    send_line(cfd, "error " + std::to_string(static_cast<int>(result.error().code)) + " " +
                       encode_value(result.error().message));
  }
}

void handle_client(UniqueFd fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
      (cred.uid != 0 && cred.uid != geteuid())) {
    send_line(fd.get(), "error " + std::to_string(static_cast<int>(Errc::permission_denied)) + " " +
                            encode_value("gcrd serves root and its own user only"));
    return;
  }
  handle_request(fd, cred.uid, std::nullopt);
}

// A connection from another host (net_store.h): the token first, then the store or a request.
void handle_network_client(UniqueFd fd, std::string peer, const std::string& token,
                           const fs::path& served) noexcept try {
  // The token line within 10 s: a silent connection holds nothing for long.
  timeval limit{10, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  auto verb = net_accept(fd.get(), token);
  timeval none{0, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
  if (!verb) {
    log("refused a connection from " + peer + ": " + verb.error().message);
    return;
  }
  if (*verb == "request") return handle_request(fd, geteuid(), served);
  store::BackendOptions o;
  o.create = true;
  auto backend = store::open_dir_backend(served, o);
  if (!backend) {
    send_line(fd.get(), "error " + std::to_string(static_cast<int>(backend.error().code)) + " " +
                            encode_value(backend.error().message));
    return;
  }
  log("serving the store " + served.string() + " to " + peer);
  serve_net_store(fd.get(), **backend);
} catch (const std::exception& e) {  // bad_alloc on a huge payload, say: this connection only
  log("a connection from " + peer + " failed: " + e.what());
}

// --listen ADDR: a TCP socket bound to HOST:PORT (HOST may be 0.0.0.0 or [::]).
Result<UniqueFd> listen_tcp(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos) return Error{Errc::invalid_argument, "--listen takes HOST:PORT"};
  std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  if (host.size() > 1 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res);
      rc != 0)
    return Error{Errc::invalid_argument, "--listen " + address + ": " + gai_strerror(rc)};
  UniqueFd fd(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int rc = fd ? ::bind(fd.get(), res->ai_addr, res->ai_addrlen) : -1;
  freeaddrinfo(res);
  if (rc != 0 || ::listen(fd.get(), 16) != 0) return errno_error("listening on " + address);
  return fd;
}

std::atomic<int> g_network_clients{0};
constexpr int kMaxNetworkClients = 64;

void serve_network(UniqueFd listener, std::string token, fs::path served) {
  for (;;) {
    sockaddr_storage from{};
    socklen_t len = sizeof from;
    int c = accept4(listener.get(), reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno != EINTR) {
        log(std::string("accept (network): ") + std::strerror(errno));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // EMFILE: do not spin
      }
      continue;
    }
    if (g_network_clients.load() >= kMaxNetworkClients) {
      ::close(c);
      continue;
    }
    char host[NI_MAXHOST] = "?", port[NI_MAXSERV] = "?";
    getnameinfo(reinterpret_cast<sockaddr*>(&from), len, host, sizeof host, port, sizeof port,
                NI_NUMERICHOST | NI_NUMERICSERV);
    int one = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    watch_peer(c);  // Note [A peer that stops answering]
    try {
      ++g_network_clients;
      std::thread(
          [](UniqueFd fd, std::string peer, std::string token, fs::path served) {
            handle_network_client(std::move(fd), std::move(peer), token, served);
            --g_network_clients;
          },
          UniqueFd(c), std::string(host) + ":" + port, token, served)
          .detach();
    } catch (const std::exception& e) {  // no thread to be had: this connection is refused
      --g_network_clients;
      log(std::string("a network connection refused: ") + e.what());
    }
  }
}

// Socket activation (packaging/systemd/gcrd.socket): systemd listens already and hands the
// socket over as fd 3 (LISTEN_PID names this process, LISTEN_FDS counts the fds).
UniqueFd socket_from_systemd() {
  const char* pid = std::getenv("LISTEN_PID");
  const char* fds = std::getenv("LISTEN_FDS");
  if (!pid || !fds || std::atoi(pid) != getpid() || std::atoi(fds) < 1) return UniqueFd();
  unsetenv("LISTEN_PID");  // not for CRIU or the keeper
  unsetenv("LISTEN_FDS");
  unsetenv("LISTEN_FDNAMES");
  fcntl(3, F_SETFD, FD_CLOEXEC);
  return UniqueFd(3);
}

int serve_forever(UniqueFd listener, const std::string& where) {
  // Warm the GPU now, off any request's path.
  if (auto gpu = Gpu::get(); !gpu) log("GPU unavailable: " + gpu.error().message);
  // And ask CRIU whether it can restore host memory lazily (`criu check --feature uffd-noncoop`,
  // a whole CRIU start: 40-80 ms here), which every restore needs to know before it starts CRIU;
  // the answer is kept for gcrd's life, so only the first restore would wait for it.
  std::thread([] {
    if (auto tools = criu::find_tools(g_self_dir)) (void)criu::lazy_pages_available(*tools);
  }).detach();
  log("listening on " + where);
  for (;;) {
    int c = accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR) continue;
      log(std::string("accept: ") + std::strerror(errno));
      continue;
    }
    std::thread([c] { handle_client(UniqueFd(c)); }).detach();
  }
}

}  // namespace

int main(int argc, char** argv) {
  fs::path socket_path = default_socket_path();
  bool detach = false;
  std::string listen_address;
  fs::path token_file, served_store;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--listen" && i + 1 < argc) {
      listen_address = argv[++i];
    } else if (a == "--token-file" && i + 1 < argc) {
      token_file = argv[++i];
    } else if (a == "--store" && i + 1 < argc) {
      served_store = fs::absolute(argv[++i]);
    } else if (a == "--containers" && i + 1 < argc) {
      g_containers.bundles = fs::absolute(argv[++i]);
    } else if (a == "--runtime" && i + 1 < argc) {
      g_containers.runtime = argv[++i];
    } else if (a == "--socket" && i + 1 < argc) {
      socket_path = argv[++i];
    } else if (a == "--detach") {
      detach = true;
    } else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: gcrd [--socket PATH] [--detach] [--listen HOST:PORT --token-file FILE [--store "
          "DIR] [--containers DIR [--runtime RUNC]]]\n  gcr's daemon; normally started by gcr on "
          "demand, or by systemd (gcrd.socket, which hands it the socket).\n  --listen: also "
          "serve other hosts over TCP (the destination of gcr migrate), authenticated by the "
          "token in FILE (0600), writing into and restoring from the store DIR (default: gcrd's "
          "default store).\n  --containers: also restore containers migrated here (gcr migrate "
          "--container), container NAME only from the bundle DIR/NAME, with RUNC (default: runc "
          "in PATH).\n");
      return 0;
    } else {
      std::fprintf(stderr, "gcrd: unknown argument '%s' (see --help)\n", a.c_str());
      return 2;
    }
  }
  std::error_code ec;
  g_self_dir = fs::canonical("/proc/self/exe", ec).parent_path();
  g_containers.socket = fs::absolute(socket_path);
  signal(SIGPIPE, SIG_IGN);
  raise_fd_limit();
  UniqueFd network;
  std::string token;
  if (!listen_address.empty()) {
    if (token_file.empty()) {
      std::fprintf(stderr, "gcrd: --listen needs --token-file (docs/security.md)\n");
      return 2;
    }
    auto t = read_token_file(token_file, true);
    auto l = t ? listen_tcp(listen_address) : Result<UniqueFd>(t.error());
    if (!l) {
      std::fprintf(stderr, "gcrd: %s\n", l.error().message.c_str());
      return 1;
    }
    token = std::move(t).value();
    network = std::move(l).value();
    if (served_store.empty()) served_store = store::Store::default_root();
  }
  auto start_network = [&] {
    if (!network) return;
    log("listening on " + listen_address + " (TCP) for the store " + served_store.string());
    std::thread(serve_network, std::move(network), token, served_store).detach();
  };
  if (UniqueFd activated = socket_from_systemd()) {
    start_network();
    return serve_forever(std::move(activated), "the socket systemd passed (gcrd.socket)");
  }
  // The socket's directory, and the log in it, are gcrd's alone (Note [Private directories]):
  // one another user made first is refused, never adopted.
  auto socket_dir = io::open_private_dir(socket_path.parent_path(), true);
  if (!socket_dir) {
    std::fprintf(stderr, "gcrd: the directory of its socket: %s\n",
                 socket_dir.error().message.c_str());
    return 1;
  }
  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.string().size() >= sizeof addr.sun_path) {
    std::fprintf(stderr, "gcrd: socket path too long: %s\n", socket_path.c_str());
    return 1;
  }
  std::strcpy(addr.sun_path, socket_path.c_str());
  // A socket file left by a gcrd that died: nothing answers on it, so take it over.
  if (access(socket_path.c_str(), F_OK) == 0) {
    UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (::connect(probe.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      std::fprintf(stderr, "gcrd: another gcrd already listens on %s\n", socket_path.c_str());
      return 1;
    }
    unlink(socket_path.c_str());
  }
  mode_t old = umask(0077);
  if (bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(listener.get(), 64) != 0) {
    std::fprintf(stderr, "gcrd: cannot listen on %s: %s\n", socket_path.c_str(),
                 std::strerror(errno));
    return 1;
  }
  umask(old);
  if (detach) {
    pid_t child = fork();
    if (child < 0) return 1;
    if (child > 0) _exit(0);  // the socket listens already: the starter may connect
    auto lfd = io::open_private_file(socket_dir->get(), "gcrd.log", O_WRONLY | O_CREAT | O_APPEND);
    if (lfd) {
      dup2(lfd->get(), 2);
    } else {
      std::fprintf(stderr, "gcrd: not logging to %s/gcrd.log: %s\n",
                   socket_path.parent_path().c_str(), lfd.error().message.c_str());
    }
  }
  start_network();
  return serve_forever(std::move(listener), socket_path.string());
}
