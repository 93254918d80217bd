// The requests gcrd serves: a table of verbs (docs/protocol.md §11), each a handler of typed
// fields (gcrd_requests.h).
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <string_view>

#include "checkpoint.h"
#include "clone_network.h"
#include "daemon.h"
#include "gcr/criu.h"
#include "gcr/criu_creds.h"
#include "gcr/process_tree.h"
#include "gcr/restore_streams.h"
#include "gcr/stream_pull.h"
#include "gcrd_protocol.h"
#include "job_move.h"
#include "job_serve.h"
#include "net_store.h"
#include "pause_point.h"
#include "restore.h"
#include "staged.h"

namespace gcr::gcrd {
namespace fs = std::filesystem;

namespace {

uid_t owner_of(pid_t pid) {
  struct stat st;
  std::string p = "/proc/" + std::to_string(pid);
  return stat(p.c_str(), &st) == 0 ? st.st_uid : static_cast<uid_t>(-1);
}

fs::path store_root(const Fields& f) {
  auto it = f.find("store");
  return it != f.end() && !it->second.empty() ? fs::path(it->second) : store::Store::default_root();
}

Result<std::shared_ptr<store::Store>> open_store(const Fields& f) {
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

// A self-contained container checkpoint keeps its device memory in a store inside the runtime's
// images directory (docs/containers.md), which the plugin sends as file 0.
Result<std::shared_ptr<store::Store>> open_images_store(const std::vector<UniqueFd>& files) {
  if (files.empty())
    return Error{Errc::protocol, "a self-contained request comes with its images directory"};
  store::StoreOptions o;
  o.root = "/proc/self/fd/" + std::to_string(files[0].get()) + "/" + kImagesStoreName;
  return store::Store::open(o, true);
}

Result<std::shared_ptr<store::Store>> request_store(const Request& r) {
  GCR_TRY_ASSIGN(bool self_contained, RequestFields(r.fields).flag("self_contained"));
  return self_contained ? open_images_store(r.files) : open_store(r.fields);
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
    if (line.size() >= 4096) return Error{Errc::protocol, "gcr's CRIU plugin sent an endless line"};
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

// A pid field of the plugin's lines ("restored pid=P", "root pid=P"); 0 if malformed.
pid_t plugin_pid(const std::string& fields) {
  auto f = decode_fields(fields);
  auto p = RequestFields(f).pid("pid");
  return p ? *p : 0;
}

// --- the handlers --------------------------------------------------------------------------------

Result<Fields> serve_ping(Daemon& d, Request&) {
  Fields out{{"pid", std::to_string(getpid())}};
  if (!d.options().listen_address.empty()) out["listen"] = d.options().listen_address;
  return out;
}

// What gcrd is doing to which process, for `gcr ps` (work_registry.h).
Result<Fields> serve_work(Daemon& d, Request&) {
  Fields out;
  for (const auto& [pid, w] : d.work().snapshot()) {
    const std::string key = "pid." + std::to_string(pid) + ".";
    out[key + "operation"] = w.operation;
    out[key + "phase"] = w.phase;
    out[key + "state"] = w.state;
  }
  // Note [Checkpoints in peers' memory] (memory_tier.h): what this host keeps of others'.
  if (MemoryTier* tier = d.options().memory_tier.get()) {
    out["tier.copies"] = std::to_string(tier->copies().size());
    out["tier.used"] = std::to_string(tier->used());
    out["tier.budget"] = std::to_string(tier->options().budget);
  }
  // Note [Checkpoints every period] (periodic.h): each schedule.
  const auto now = std::chrono::steady_clock::now();
  for (const auto& [pid, e] : d.periodic().snapshot()) {
    const std::string key = "every." + std::to_string(pid) + ".";
    out[key + "every_ms"] = std::to_string(e.request.every.count());
    out[key + "keep"] = std::to_string(e.request.keep);
    out[key + "name"] = e.request.name;
    out[key + "count"] = std::to_string(e.count);
    out[key + "delayed"] = std::to_string(e.delayed);
    out[key + "failed"] = std::to_string(e.failed);
    out[key + "last_id"] = e.last_id;
    out[key + "last_error"] = e.last_error;
    if (!e.last_tiers.empty()) out[key + "tiers"] = e.last_tiers;
    if (!e.request.hosts.empty())
      out[key + "job_hosts"] = std::to_string(e.request.hosts.size() + 1);
    out[key + "last_stall_ns"] = std::to_string(e.last_stall_ns);
    if (e.count)
      out[key + "last_age_ms"] = std::to_string(
          std::chrono::duration_cast<std::chrono::milliseconds>(now - e.last_at).count());
  }
  return out;
}

// Note [Checkpoints every period] (periodic.h): `gcr run --checkpoint-every`, for itself.
Result<Fields> serve_every(Daemon& d, Request& r) {
  GCR_TRY_ASSIGN(EveryFields f, decode_every(r.fields));
  if (r.client_uid != 0 && owner_of(f.pid) != r.client_uid)
    return Error{Errc::permission_denied,
                 "process " + std::to_string(f.pid) +
                     " is not yours; only root or its owner may checkpoint it"};
  GCR_TRY_ASSIGN(criu::Tools tools, criu::find_tools(d.options().self_dir));
  GCR_TRY_ASSIGN(auto st, open_store(r.fields));
  EveryRequest e;
  e.pid = f.pid;
  e.every = f.every;
  e.keep = f.keep;
  e.name = f.name;
  GCR_TRY(d.periodic().start(e, st, tools, &d.work()));
  return Fields{{"pid", std::to_string(f.pid)}};
}

// Note [CRIU run by someone else] (checkpoint.h): the plugin's first PAUSE_DEVICES.
Result<Fields> serve_criu_dump(Daemon& d, Request& r) {
  if (r.client_uid != 0)
    return Error{Errc::permission_denied, "only root's CRIU may hand gcrd a dump or a restore"};
  GCR_TRY_ASSIGN(CriuDumpFields f, decode_criu_dump(r.fields));
  GCR_TRY_ASSIGN(criu::Tools tools, criu::find_tools(d.options().self_dir));
  GCR_TRY_ASSIGN(auto st, request_store(r));
  CheckpointRequest req;
  req.pid = f.pid;
  req.quiesce_timeout = f.timeout;
  req.external_criu = [fd = r.client_fd](const std::string& id) -> Result<bool> {
    if (!send_line(fd, "ok " + encode_fields({{"id", id}})))
      return Error{Errc::io_error, "gcr's CRIU plugin hung up before its dump"};
    return read_plugin_result(fd);
  };
  GCR_TRY_ASSIGN(CheckpointReport rep, checkpoint_process(*st, tools, req, r.progress, &d.work()));
  if (rep.kind == "none") return Fields{{"kind", "none"}};  // not under gcr: the driver's steps
  return Fields{{"id", rep.id},
                {"kept_running", rep.kept_running ? "1" : "0"},
                {"dirty_bytes", std::to_string(rep.dirty_bytes)}};  // for gcrd's log
}

// The runtime's CRIU restores; the plugin says which tasks, then how it went.
Result<pid_t> restored_by_plugin(int fd) {
  if (!send_line(fd, "ok"))
    return Error{Errc::io_error, "gcr's CRIU plugin hung up before the restore"};
  // "restored pid=P" for each CUDA task, then "result ret=N".
  std::vector<pid_t> pids;
  pid_t root = 0;
  for (;;) {
    GCR_TRY_ASSIGN(std::string line, read_plugin_line(fd));
    if (line.rfind("root ", 0) == 0) {
      root = plugin_pid(line.substr(5));
      continue;
    }
    if (line.rfind("restored ", 0) == 0) {
      if (pid_t p = plugin_pid(line.substr(9))) pids.push_back(p);
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
}

Result<Fields> serve_criu_restore(Daemon& d, Request& r) {
  if (r.client_uid != 0)
    return Error{Errc::permission_denied, "only root's CRIU may hand gcrd a dump or a restore"};
  GCR_TRY_ASSIGN(CriuRestoreFields f, decode_criu_restore(r.fields));
  GCR_TRY_ASSIGN(criu::Tools tools, criu::find_tools(d.options().self_dir));
  GCR_TRY_ASSIGN(bool self_contained, RequestFields(r.fields).flag("self_contained"));
  GCR_TRY_ASSIGN(auto st, request_store(r));
  RestoreRequest req;
  req.name = f.name;
  if (!f.device_map.empty()) {
    GCR_TRY_ASSIGN(req.device_map, parse_device_map(f.device_map));
  }
  req.external_criu = [fd = r.client_fd]() { return restored_by_plugin(fd); };
  if (geteuid() == 0 && !self_contained) GCR_TRY(check_root_store(store_root(r.fields)));
  GCR_TRY_ASSIGN(RestoreReport rep, restore_checkpoint(*st, tools, req, r.progress));
  return Fields{{"id", rep.id}, {"pid", std::to_string(rep.pid)}};
}

// Note [Containers restored for a network peer] (container_host.h).
Result<Fields> serve_restore_container(Daemon& d, Request& r) {
  GCR_TRY_ASSIGN(criu::Tools tools, criu::find_tools(d.options().self_dir));
  GCR_TRY_ASSIGN(auto st, request_store(r));
  const std::set<uid_t>& uids = r.from_network ? r.peer_uids : d.options().peer_uids;
  return restore_container_here(d.options().containers, uids, tools, *st, r.fields, r.client_fd,
                                r.progress);
}

// Note [Staged restore] (staged.h).
Result<Fields> serve_stage(Daemon&, Request& r) {
  GCR_TRY_ASSIGN(auto st, request_store(r));
  GCR_TRY_ASSIGN(std::string name, RequestFields(r.fields).text("name", 256));
  pause_point("stage");
  GCR_TRY_ASSIGN(std::uint64_t loaded, stage_checkpoint(*st, name, r.progress));
  return Fields{{"loaded_bytes", std::to_string(loaded)}};
}

// Note [Migration] (cli/cmd_migrate.cpp): "commit" hands the process to the destination; from then
// on a client that goes away ends it, before then it runs on.
bool wait_for_migration(int fd, const std::string& id,
                        const std::function<void(const std::string&)>& heard) {
  if (!send_line(fd, "ok " + encode_fields({{"held", "1"}, {"id", id}}))) return false;
  bool committed = false;
  for (;;) {
    auto line = read_plugin_line(fd);
    if (!line) return committed;
    if (*line == "commit" && !committed) {
      committed = true;
      heard("commit");
    }
    if (*line == "running" && committed) heard("running");
    if (*line == "end") return true;
    if (*line == "resume") return false;
  }
}

Fields checkpoint_reply(const CheckpointReport& rep) {
  Fields out{{"id", rep.id},
             {"kind", rep.kind},
             {"pid", std::to_string(rep.pid)},
             {"regions", std::to_string(rep.regions)},
             {"region_bytes", std::to_string(rep.region_bytes)},
             {"dirty_bytes", std::to_string(rep.dirty_bytes)},
             {"cow_copies", std::to_string(rep.cow_copies)},
             {"cow_waits", std::to_string(rep.cow_waits)},
             {"host_tracked_tasks", std::to_string(rep.host_tracked_tasks)},
             {"host_pages_from_process", std::to_string(rep.host_pages_from_process)},
             {"host_pages_from_parent", std::to_string(rep.host_pages_from_parent)},
             {"host_pages_pinned", std::to_string(rep.host_pages_pinned)},
             {"host_pinned_touched_bytes", std::to_string(rep.host_pinned_touched_bytes)},
             {"host_pages_saved", std::to_string(rep.host_pages_saved)},
             {"host_pages_dma_frozen", std::to_string(rep.host_pages_dma_frozen)},
             {"processes", std::to_string(rep.processes)},
             {"shared_regions", std::to_string(rep.shared_regions)},
             {"images_in", rep.images_in}};
  for (std::size_t i = 0; i < rep.warnings.size(); ++i)
    out["warning" + (i ? "." + std::to_string(i) : std::string())] = rep.warnings[i];
  for (const auto& [k, v] : rep.times_ns) out["time." + k + "_ns"] = std::to_string(v);
  for (const auto& [k, v] : rep.starts_ns) out["start." + k + "_ns"] = std::to_string(v);
  for (const auto& [k, v] : rep.stats) out["stat." + k] = std::to_string(v);
  return out;
}

Result<Fields> serve_checkpoint(Daemon& d, Request& r) {
  GCR_TRY_ASSIGN(CheckpointFields f, decode_checkpoint(r.fields));
  for (pid_t pid : f.job_pids)
    if (r.client_uid != 0 && owner_of(pid) != r.client_uid)
      return Error{Errc::permission_denied,
                   "process " + std::to_string(pid) +
                       " is not yours; only root or its owner may checkpoint it"};
  if (r.client_uid != 0 && owner_of(f.pid) != r.client_uid)
    return Error{Errc::permission_denied,
                 "process " + std::to_string(f.pid) +
                     " is not yours; only root or its owner may checkpoint it"};
  GCR_TRY_ASSIGN(criu::Tools tools, criu::find_tools(d.options().self_dir));
  GCR_TRY_ASSIGN(auto st, request_store(r));
  CheckpointRequest req;
  req.pid = f.pid;
  req.job_pids = f.job_pids;
  req.tag = f.tag;
  req.leave_running = f.leave_running;
  req.stop_copy = f.stop_copy;
  req.tcp_close = f.tcp_close;
  req.device_only = f.device_only;
  req.quiesce_timeout = f.timeout;
  for (const auto& [key, value] : f.labels) req.extra_meta["label." + key] = value;
  if (f.hold)
    req.hold = [fd = r.client_fd](const std::string& id,
                                  const std::function<void(const std::string&)>& heard) {
      return wait_for_migration(fd, id, heard);
    };
  if (!f.remote.empty()) {  // Note [A job across hosts] (job_link.h): this gcrd coordinates
    if (r.from_network)
      return Error{Errc::permission_denied,
                   "a job across hosts is coordinated from one of its hosts"};
    std::vector<JobHost> hosts;
    for (const auto& h : f.remote) hosts.push_back({h.address, h.pids});
    JobOptions job;
    job.key = NetKey{f.net_key_name, f.net_key, std::nullopt};
    job.idle = f.idle;
    job.copy_parts = f.copy_parts;
    job.peer.copies = f.peer_copies;
    job.peer.self_address = d.options().listen_address;
    job.served_store = d.options().served_store;
    if (f.every.count()) {  // Note [Checkpoints every period]: the job's schedule
      GCR_TRY(check_roots(req.job_pids));
      GCR_TRY(check_roots({req.pid}));
      EveryRequest e;
      e.pid = f.pid;
      e.every = f.every;
      e.keep = f.every_keep;
      e.name = f.tag.value_or("every-" + std::to_string(f.pid));
      e.job_pids = f.job_pids;
      e.hosts = hosts;
      e.job = job;
      if (job.peer.copies)  // what copies need, said now rather than at the first checkpoint
        GCR_TRY(plan_peer_copies(job.peer, hosts));
      GCR_TRY(d.periodic().start(e, st, tools, &d.work()));
      return Fields{{"pid", std::to_string(f.pid)},
                    {"every_ms", std::to_string(f.every.count())},
                    {"every_keep", std::to_string(f.every_keep)},
                    {"every_name", e.name},
                    {"job_hosts", std::to_string(hosts.size() + 1)}};
    }
    GCR_TRY_ASSIGN(
        CheckpointReport rep,
        f.move ? checkpoint_moving_rank(*st, tools, req, hosts, job, r.progress, &d.work())
               : checkpoint_across_hosts(*st, tools, req, hosts, job, r.progress, &d.work()));
    Fields out = checkpoint_reply(rep);
    out["job_hosts"] = std::to_string(hosts.size() + 1);
    if (rep.peer_copies_wanted) {
      out["peer_copies"] = std::to_string(rep.peer_copies);
      out["peer_copies_wanted"] = std::to_string(rep.peer_copies_wanted);
    }
    return out;
  }
  GCR_TRY_ASSIGN(CheckpointReport rep, checkpoint_process(*st, tools, req, r.progress, &d.work()));
  return checkpoint_reply(rep);
}

// Note [A job across hosts] (job_link.h): this host's part, for the coordinator on the request's
// connection. From the network, only processes of the users the peer may run (Note [Who a peer
// may run]).
Result<Fields> serve_job_part(Daemon& d, Request& r) {
  GCR_TRY_ASSIGN(JobPartFields f, decode_job_part(r.fields));
  for (pid_t pid : f.pids) {
    uid_t owner = owner_of(pid);
    bool allowed =
        r.from_network ? r.peer_uids.contains(owner) : (r.client_uid == 0 || owner == r.client_uid);
    if (!allowed)
      return Error{Errc::permission_denied,
                   "process " + std::to_string(pid) + " is of a user this peer may not checkpoint"};
  }
  if (f.bystander) {  // Note [A rank moved while its job runs] (job_move.h)
    GCR_TRY_ASSIGN(BystanderReport rep,
                   bystand({f.pids, f.timeout, f.idle, f.freeze}, r.client_fd, r.progress));
    return Fields{{"time.stall_ns", std::to_string(rep.stall_ns)},
                  {"processes", std::to_string(rep.processes)},
                  {"threads", std::to_string(rep.threads)}};
  }
  GCR_TRY_ASSIGN(criu::Tools tools, criu::find_tools(d.options().self_dir));
  GCR_TRY_ASSIGN(auto st, request_store(r));
  CheckpointRequest req;
  req.pid = f.pids[0];
  req.job_pids.assign(f.pids.begin() + 1, f.pids.end());
  req.leave_running = f.leave_running;
  req.quiesce_timeout = f.timeout;
  req.extra_meta["job_id"] = f.job;
  GCR_TRY_ASSIGN(CheckpointReport rep,
                 checkpoint_part(*st, tools, req, r.client_fd, f.idle, r.progress, &d.work()));
  return checkpoint_reply(rep);
}

// Note [A job across hosts] (job_link.h): the other hosts' parts of a job's checkpoint.
Result<std::vector<JobPart>> job_parts_of(store::Store& st, const std::string& name) {
  auto id = st.resolve(name);
  if (!id) return std::vector<JobPart>{};  // the restore says what is wrong with the name
  GCR_TRY_ASSIGN(store::Manifest m, st.read_manifest(*id));
  return decode_job_parts(m.meta_or("job_parts"));
}

// Note [Checkpoints in peers' memory] (memory_tier.h): `name` is this host's part of a job, and
// this host's memory holds the job's manifest (its coordinator's part): that copy.
std::optional<TierCopy> lost_coordinator_copy(Daemon& d, store::Store& st,
                                              const std::string& name) {
  auto id = st.resolve(name);
  if (!id || !d.options().memory_tier) return std::nullopt;
  auto m = st.read_manifest(*id);
  if (!m || m->meta_or("job_part") != "1") return std::nullopt;
  return d.options().memory_tier->job_manifest(m->meta_or("job_id"));
}

// Note [Checkpoints in peers' memory] (memory_tier.h): where the copies of each part were made.
Result<std::map<std::string, std::vector<std::string>>> holders_of(store::Store& st,
                                                                   const std::string& name) {
  GCR_TRY_ASSIGN(store::CheckpointId id, st.resolve(name));
  GCR_TRY_ASSIGN(store::Manifest m, st.read_manifest(id));
  return decode_peer_copies(m.meta_or("peer_copies"));
}

// verb latest (gcr restore --latest NAME): the newest NAME.N of the store complete in some tier,
// every part of a job's checkpoint found on its host, in a peer's memory or in this store (Note
// [Checkpoints in peers' memory] in memory_tier.h); without the job's key (net_key) the newest.
Result<Fields> serve_latest(Daemon& d, Request& r) {
  if (r.from_network) return Error{Errc::permission_denied, "verb latest is for local clients"};
  RequestFields rf(r.fields);
  GCR_TRY_ASSIGN(std::string series, rf.text("name", 200));
  GCR_TRY_ASSIGN(std::string key_name, rf.text("net_key_name", 64));
  GCR_TRY_ASSIGN(std::string secret, rf.text("net_key", 4096));
  GCR_TRY_ASSIGN(auto st, request_store(r));
  GCR_TRY_ASSIGN(auto listed, st->list());
  std::map<std::uint64_t, store::CheckpointId, std::greater<>> numbered;
  const std::string prefix = series + ".";
  for (const store::CheckpointInfo& c : listed)
    for (const std::string& t : c.tags)
      if (t.size() > prefix.size() && t.starts_with(prefix) &&
          t.find_first_not_of("0123456789", prefix.size()) == std::string::npos)
        numbered[std::strtoull(t.c_str() + prefix.size(), nullptr, 10)] = c.id;
  if (numbered.empty())
    return Error{Errc::not_found, "no checkpoint " + series +
                                      ".N in the store (--latest takes the NAME of gcr run "
                                      "--checkpoint-every or gcr checkpoint --every)"};
  const NetKey key{key_name, secret, std::nullopt};
  const std::filesystem::path memory =
      d.options().memory_tier ? d.options().memory_tier->options().root / "store" : "";
  Fields out;
  std::size_t skipped = 0;
  for (const auto& [n, id] : numbered) {
    auto read = st->read_manifest(id);
    if (!read) continue;  // removed meanwhile (a schedule's oldest)
    store::Manifest m = std::move(read).value();
    std::string missing;
    Fields from;
    if (m.meta_or("job_part") == "1") {  // this host's part: the job's manifest in its memory?
      auto copy = lost_coordinator_copy(d, *st, prefix + std::to_string(n));
      auto job = copy ? d.options().memory_tier->manifest(copy->id)
                      : Result<store::Manifest>(Error{Errc::not_found, ""});
      if (job) {
        m = std::move(job).value();
        from["part_from." + copy->origin] = "this host's peer memory";
      } else {
        missing =
            "this host's part of a job whose manifest is neither here nor in this host's "
            "memory (restore it from the job's coordinator)";
      }
    }
    GCR_TRY_ASSIGN(std::vector<JobPart> parts, decode_job_parts(m.meta_or("job_parts")));
    const auto holders = decode_peer_copies(m.meta_or("peer_copies"));
    if (!secret.empty() && missing.empty())
      for (const JobPart& p : parts) {
        auto h = holders.find(p.address);
        auto found = find_part(
            part_sources(p.address, st->options().root, memory, d.options().listen_address,
                         h == holders.end() ? std::vector<std::string>{} : h->second, key),
            p.id);
        if (!found) {
          missing = "the part of " + p.address + ": " + found.error().message;
          break;
        }
        from["part_from." + p.address] = *found;
      }
    if (missing.empty()) {
      out.merge(from);
      out["name"] = prefix + std::to_string(n);
      out["id"] = id.hex();
      return out;
    }
    out["skipped." + std::to_string(skipped++)] = prefix + std::to_string(n) + ": " + missing;
  }
  return Error{Errc::not_found,
               "no checkpoint " + series + ".N is complete in any tier: " + out["skipped.0"]};
}

// Note [Checkpoints in peers' memory] (memory_tier.h): verb tier, from a job's coordinator over
// gcrd-net: a part's copy pulled into this gcrd's memory (op keep), or a part of an old checkpoint
// of the job's schedule removed from this store (op remove).
Result<Fields> serve_tier(Daemon& d, Request& r) {
  if (!r.from_network || r.net_key == nullptr)
    return Error{Errc::permission_denied, "verb tier is for the gcrds of a job, over gcrd-net"};
  GCR_TRY_ASSIGN(TierFields f, decode_tier(r.fields));
  const store::CheckpointId id = *store::CheckpointId::from_hex(f.id);
  if (f.op == "remove") {
    GCR_TRY_ASSIGN(auto st, request_store(r));
    auto m = st->read_manifest(id);
    if (!m) return Fields{{"removed", "0"}};  // gone already
    if (m->meta_or("job_part") != "1")
      return Error{Errc::permission_denied,
                   "checkpoint " + f.id.substr(0, 12) + " is not a job's part: not removed"};
    GCR_TRY(st->remove(id));
    (void)st->gc();
    d.log("removed the old job part " + f.id.substr(0, 12));
    return Fields{{"removed", "1"}};
  }
  MemoryTier* tier = d.options().memory_tier.get();
  if (!tier)
    return Error{Errc::not_found,
                 "this gcrd keeps no peer memory: start it with gcr daemon --peer-memory SIZE"};
  if (!r.net_key->name.empty())
    return Error{Errc::unsupported, "peer memory is for hosts of the shared token only"};
  GCR_TRY_ASSIGN(auto from, open_net_backend(f.from, *r.net_key));
  KeepRequest k{{id, f.series, f.origin, f.seq}, f.protect, f.oldest};
  GCR_TRY_ASSIGN(KeepReport rep, tier->keep(*from, k));
  Fields out{{"copied_bytes", std::to_string(rep.copied_bytes)},
             {"logical_bytes", std::to_string(rep.logical_bytes)},
             {"used", std::to_string(rep.used)},
             {"budget", std::to_string(rep.budget)},
             {"already_there", rep.already_there ? "1" : "0"},
             {"time_ns", std::to_string(rep.elapsed_ns)}};
  for (std::size_t i = 0; i < rep.evicted.size(); ++i)
    out["evicted." + std::to_string(i)] = rep.evicted[i].series + "." +
                                          std::to_string(rep.evicted[i].seq) + " of " +
                                          rep.evicted[i].origin;
  d.log("kept " + f.series + "." + std::to_string(f.seq) + " of " + f.origin + " in peer memory (" +
        std::to_string(rep.copied_bytes) + " bytes new, " + std::to_string(rep.used) + " of " +
        std::to_string(rep.budget) + " used)");
  return out;
}

Fields restore_reply(const RestoreReport& rep, bool eager) {
  Fields out{{"id", rep.id},
             {"kind", rep.kind},
             {"pid", std::to_string(rep.pid)},
             {"region_bytes", std::to_string(rep.region_bytes)},
             {"wanted_regions", std::to_string(rep.wanted_regions)},
             {"original_pid", std::to_string(rep.original_pid)},
             {"store_read_bytes", std::to_string(rep.store_read_bytes)},
             {"shared_bytes", std::to_string(rep.shared_bytes)},
             {"staged_bytes", std::to_string(rep.staged_bytes)},
             {"new_pid_namespace", rep.new_pid_namespace ? "1" : "0"},
             {"mode", eager ? "eager" : "on-demand"},
             {"host_memory", rep.lazy_host ? "lazy" : "eager"},
             {"host_source", rep.host_from_store ? "store" : "images"},
             {"host_served_bytes", std::to_string(rep.host_served_bytes)}};
  for (pid_t p : rep.tree_pids)  // Note [A job of several trees] (job.h)
    out["job_pids"] += (out["job_pids"].empty() ? "" : ",") + std::to_string(p);
  for (std::size_t i = 0; i < rep.warnings.size(); ++i)
    out["warning" + (i ? "." + std::to_string(i) : std::string())] = rep.warnings[i];
  for (const auto& [k, v] : rep.times_ns) out["time." + k + "_ns"] = std::to_string(v);
  for (const auto& [k, v] : rep.starts_ns) out["start." + k + "_ns"] = std::to_string(v);
  return out;
}

// Note [Files reopened for the restored process] (gcr/restore_streams.h), for a migration's
// destination: no caller here opens the process's files, so gcrd does, as the checkpoint's owner
// and by the same rules, and hands them to CRIU; terminals and pipes are left to CRIU.
Status open_files_for_peer(store::Store& st, const std::string& name, RestoreRequest& req) {
  // Still arriving, a checkpoint is named by its full id, and has no manifest in the store yet.
  auto arriving = req.arriving ? store::CheckpointId::from_hex(name) : std::nullopt;
  GCR_TRY_ASSIGN(store::CheckpointId id,
                 arriving ? Result<store::CheckpointId>(*arriving) : st.resolve(name));
  GCR_TRY_ASSIGN(auto reader, st.open_checkpoint(id, req.arriving));
  criu::StreamOptions o;
  o.files_only = true;
  GCR_TRY_ASSIGN(criu::StreamPlan plan, criu::plan_streams(reader->manifest().meta, o));
  for (auto& in : plan.inherit) req.inherit.push_back({in.key, std::move(in.fd)});
  return ok();
}

// Note [Checkpoints every period] (periodic.h): a process restored from a periodic checkpoint is
// checkpointed so again, its checkpoints counting on under the same name.
// The schedule restored checkpoint `rep` was taken by (META every_*), for its restored root; none
// when it was not a periodic one (or `job` and it is not a job's manifest).
std::optional<EveryRequest> schedule_of(const std::shared_ptr<store::Store>& st,
                                        const RestoreReport& rep, bool job) {
  auto id = store::CheckpointId::from_hex(rep.id);
  auto m = id ? st->read_manifest(*id) : Result<store::Manifest>(Error{Errc::not_found, ""});
  if (!m || m->meta_or("every_ms").empty() || (job && !m->meta_or("job_part").empty()))
    return std::nullopt;
  EveryRequest e;
  e.pid = rep.pid;
  e.every = std::chrono::milliseconds(std::strtoll(m->meta_or("every_ms").c_str(), nullptr, 10));
  e.keep = static_cast<unsigned>(std::strtoul(m->meta_or("every_keep", "3").c_str(), nullptr, 10));
  e.name = m->meta_or("every_name");
  e.after = std::strtoull(m->meta_or("every_seq", "0").c_str(), nullptr, 10);
  if (e.every.count() < 100 || e.keep == 0 || e.name.empty()) return std::nullopt;
  if (job) {
    const auto holders = decode_peer_copies(m->meta_or("peer_copies"));
    e.job.peer.copies = holders.empty() ? 0 : static_cast<unsigned>(holders.begin()->second.size());
  }
  return e;
}

void schedule_again(Daemon& d, const std::shared_ptr<store::Store>& st, const criu::Tools& tools,
                    const RestoreReport& rep, const Progress& progress, Fields& out) {
  auto schedule = schedule_of(st, rep, false);
  if (!schedule) return;
  EveryRequest& e = *schedule;
  if (Status s = d.periodic().start(e, st, tools, &d.work()); !s) {
    progress("process " + std::to_string(rep.pid) +
             " is not checkpointed every period again: " + s.error().message);
    return;
  }
  out["every_ms"] = std::to_string(e.every.count());
  progress("process " + std::to_string(rep.pid) + " is checkpointed every " +
           std::to_string(e.every.count()) + " ms again (as " + e.name + ")");
}

// The same for a job across hosts this gcrd restored as its coordinator: its hosts as restored
// (`remote`), as many peer copies as before (Note [Checkpoints in peers' memory]).
void schedule_job_again(Daemon& d, const std::shared_ptr<store::Store>& st,
                        const criu::Tools& tools, const RestoreReport& rep,
                        const std::vector<RemoteRestored>& remote, JobOptions job,
                        const Progress& progress, Fields& out) {
  auto schedule = schedule_of(st, rep, true);
  if (!schedule) return;
  EveryRequest& e = *schedule;
  e.job_pids = rep.tree_pids;
  for (const RemoteRestored& r : remote) {
    auto pids = parse_pid_list(r.pids);
    if (!pids) return;  // a host that did not say: not scheduled blind
    e.hosts.push_back(JobHost{r.address, std::move(*pids)});
  }
  job.peer = {};
  job.peer.copies = e.job.peer.copies;
  job.peer.self_address = d.options().listen_address;
  job.served_store = d.options().served_store;
  job.place.clear();
  job.holders.clear();
  e.job = job;
  if (Status s = d.periodic().start(e, st, tools, &d.work()); !s) {
    progress("the job is not checkpointed every period again: " + s.error().message);
    return;
  }
  out["every_ms"] = std::to_string(e.every.count());
  out["every_name"] = e.name;
  progress("the job is checkpointed every " + std::to_string(e.every.count()) + " ms again (as " +
           e.name + ", counting on from " + e.name + "." + std::to_string(e.after) + ")");
}

// Note [A job across hosts] (job_link.h): checkpoint f.name is a job's manifest naming `parts` on
// other hosts: this gcrd coordinates its restore (and schedules it again, if it was scheduled).
Result<Fields> restore_job_here(Daemon& d, Request& r, const RestoreFields& f,
                                const std::shared_ptr<store::Store>& st, const criu::Tools& tools,
                                RestoreRequest& req, const std::vector<JobPart>& parts) {
  if (f.net_key.empty())
    return Error{Errc::invalid_argument,
                 "checkpoint " + f.name + " is a job across " + std::to_string(parts.size() + 1) +
                     " hosts: give their token with --token-file FILE (the file their gcr "
                     "daemon --listen reads)"};
  JobOptions job;
  job.key = NetKey{f.net_key_name, f.net_key, std::nullopt};
  job.idle = f.idle;
  job.place = f.place;
  job.peer.self_address = d.options().listen_address;
  GCR_TRY_ASSIGN(job.holders, holders_of(*st, f.name));
  if (d.options().memory_tier) job.memory_store = d.options().memory_tier->options().root / "store";
  std::vector<RemoteRestored> remote;
  GCR_TRY_ASSIGN(RestoreReport rep,
                 restore_across_hosts(*st, tools, req, parts, job, r.progress, &remote));
  Fields out = restore_reply(rep, req.eager);
  schedule_job_again(d, st, tools, rep, remote, job, r.progress, out);
  out["job_hosts"] = std::to_string(parts.size() + 1);
  for (std::size_t i = 0; i < remote.size(); ++i) {
    out["remote." + std::to_string(i)] = remote[i].address;
    out["remote_pids." + std::to_string(i)] = remote[i].pids;
    if (!remote[i].placed_from.empty())
      out["remote_from." + std::to_string(i)] = remote[i].placed_from;
  }
  return out;
}

// Note [A clone's network] (clone_network.h): a clone's namespace, made for the restore (root
// only: it joins a bridge of the host's, or a namespace of anyone's).
Result<std::optional<CloneNetwork>> clone_network_for(const RestoreFields& f, const Request& r,
                                                      RestoreRequest& req) {
  if (!f.clone) return std::optional<CloneNetwork>();
  if (r.client_uid != 0 || r.from_network)
    return Error{Errc::permission_denied,
                 "only root restores clones (each gets network and PID namespaces of its own)"};
  GCR_TRY_ASSIGN(CloneNetwork net, CloneNetwork::make({f.clone_netns, f.clone_address,
                                                       f.clone_bridge, f.clone_gateway}));
  req.new_pid_namespace = true;
  req.netns = net.path();
  req.hostname = f.clone_hostname;
  return std::optional<CloneNetwork>(std::move(net));
}

// What a restore request asks for, with the files that came with it.
Result<RestoreRequest> restore_request_of(const RestoreFields& f, Request& r) {
  RestoreRequest req;
  req.name = f.name;
  req.device = f.device;
  if (!f.device_map.empty()) {
    GCR_TRY_ASSIGN(req.device_map, parse_device_map(f.device_map));
  }
  req.eager = f.eager;
  req.arriving = f.arriving;
  req.new_pid_namespace = f.new_pid_namespace;
  // Note [Addresses that move with a rank]: a placed part, or a rank moved (job_move.h).
  req.take_addresses = f.take_addresses;
  for (std::size_t i = 0; i < r.files.size(); ++i) {
    if (fcntl(r.files[i].get(), F_GETFL) & O_PATH)
      return Error{Errc::invalid_argument, "file " + std::to_string(i) + " for " + f.inherit[i] +
                                               " is an O_PATH descriptor: send an open file"};
    req.inherit.push_back({f.inherit[i], std::move(r.files[i])});
  }
  req.client_uid = r.client_uid;
  return req;
}

Result<Fields> serve_restore(Daemon& d, Request& r) {
  GCR_TRY_ASSIGN(RestoreFields f, decode_restore(r.fields, r.files.size()));
  GCR_TRY_ASSIGN(criu::Tools tools, criu::find_tools(d.options().self_dir));
  GCR_TRY_ASSIGN(auto st, request_store(r));
  GCR_TRY_ASSIGN(RestoreRequest req, restore_request_of(f, r));
  if (geteuid() == 0) GCR_TRY(check_root_store(store_root(r.fields)));
  // Note [Checkpoints in peers' memory] (memory_tier.h): a placed part pulled from a peer's
  // memory while it is restored: the CRIU files first, then the regions as they are touched.
  std::unique_ptr<store::Backend> pull_source;
  std::unique_ptr<store::StreamedPull> pull;
  if (!f.pull_from.empty()) {
    if (!r.from_network || r.net_key == nullptr)
      return Error{Errc::permission_denied, "pull_from is for a job's coordinator over gcrd-net"};
    GCR_TRY_ASSIGN(pull_source,
                   open_net_backend(f.pull_from, *r.net_key,
                                    f.pull_memory ? NetStore::memory : NetStore::served));
    GCR_TRY_ASSIGN(pull,
                   store::StreamedPull::start(*pull_source, *store::CheckpointId::from_hex(f.name),
                                              st->options().root));
    GCR_TRY(pull->files_ready().context("pulling the part from " + f.pull_from));
    req.arriving = pull->arriving();
  }
  if (r.from_network) {
    if (req.inherit.empty())
      GCR_TRY(open_files_for_peer(*st, f.name, req)
                  .context("opening the files of checkpoint " + f.name + " for its process"));
    req.check_images = [&uids = r.peer_uids](const std::filesystem::path& images) -> Status {
      GCR_TRY_ASSIGN(auto creds, criu::read_image_creds(images));
      return criu::check_peer_may_run(creds, uids);
    };
  }
  if (f.job_part) {  // Note [A job across hosts] (job_link.h): for the job's coordinator
    auto rep = restore_part(*st, tools, req, r.client_fd, f.idle, r.progress);
    if (pull) {
      if (!rep) pull->cancel();      // no one waits for the rest
      auto pulled = pull->finish();  // the command ends once all of it is here, as any restore
      if (rep && !pulled)
        rep->warnings.push_back("pulling the part from " + f.pull_from + ": " +
                                pulled.error().message);
    }
    if (!rep) return std::move(rep).error();
    return restore_reply(*rep, req.eager);
  }
  if (!r.from_network && !f.net_key.empty() && d.options().memory_tier)
    if (auto copy = lost_coordinator_copy(d, *st, f.name)) {
      JobOptions job;
      job.key = NetKey{f.net_key_name, f.net_key, std::nullopt};
      job.idle = f.idle;
      job.place = f.place;
      return restore_for_lost_coordinator(copy->origin, copy->id.hex(),
                                          d.options().memory_tier->options().root / "store", job,
                                          r.progress);
    }
  GCR_TRY_ASSIGN(std::vector<JobPart> parts, job_parts_of(*st, f.name));
  if (!parts.empty() && f.clone)
    return Error{Errc::unsupported, f.name + " is a job's checkpoint: a clone is of one process"};
  if (!parts.empty()) return restore_job_here(d, r, f, st, tools, req, parts);
  GCR_TRY_ASSIGN(std::optional<CloneNetwork> clone, clone_network_for(f, r, req));
  GCR_TRY_ASSIGN(RestoreReport rep, restore_checkpoint(*st, tools, req, r.progress));
  Fields out = restore_reply(rep, req.eager);
  if (clone) {  // a second instance: the original's schedule stays the original's
    out["clone"] = "1";
    out["clone_network"] = clone->description();
    if (!f.clone_hostname.empty()) out["clone_hostname"] = f.clone_hostname;
    return out;
  }
  schedule_again(d, st, tools, rep, r.progress, out);
  return out;
}

using Handler = Result<Fields> (*)(Daemon&, Request&);

// Every verb gcrd serves (docs/protocol.md §11).
const std::map<std::string_view, Handler>& handlers() {
  static const std::map<std::string_view, Handler> table = {
      {"ping", serve_ping},
      {"work", serve_work},
      {"every", serve_every},
      {"checkpoint", serve_checkpoint},
      {"job_part", serve_job_part},
      {"tier", serve_tier},
      {"latest", serve_latest},
      {"restore", serve_restore},
      {"stage", serve_stage},
      {"criu_dump", serve_criu_dump},
      {"criu_restore", serve_criu_restore},
      {"restore_container", serve_restore_container},
  };
  return table;
}

}  // namespace

Result<Fields> Daemon::serve(Request& request) {
  auto it = handlers().find(request.verb);
  if (it == handlers().end())
    return Error{Errc::invalid_argument, "unknown request '" + request.verb.substr(0, 64) + "'"};
  return it->second(*this, request);
}

}  // namespace gcr::gcrd
