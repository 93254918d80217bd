// The checkpoint protocol (checkpoint.h): what gcrd reads of the job before anything stops
// (inspect), then gcr's checkpoint as a transaction (checkpoint_txn.h) over gcrd's ports
// (checkpoint_ports_gcrd.h), or the driver's own (--stop-copy). Every failure leaves the process
// running: Note [Checkpoint phases].
#include "checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "checkpoint_ports_gcrd.h"
#include "checkpoint_txn.h"
#include "device.h"
#include "gcr/control.h"
#include "gcr/process_tree.h"
#include "gcr/settings.h"
#include "job.h"
#include "job_link.h"
#include "lineage.h"
#include "pause_point.h"
#include "phase_clock.h"
#include "restore.h"
#include "transaction.h"
#include "work_dir.h"
#include "work_registry.h"

namespace gcr::gcrd {
namespace fs = std::filesystem;

namespace {

// What the process holds open is recorded for the restore (META files, shell_job, tcp_close).
std::map<std::string, std::string> base_meta(pid_t pid, const std::string& kind,
                                             const criu::ProcessTree& tree,
                                             const CheckpointRequest& req) {
  std::map<std::string, std::string> meta;
  meta["pid"] = std::to_string(pid);
  // The owner: whose checkpoint it is, and whose rights a restore opens the recorded files with
  // (restore_streams.h). uid -1 when /proc cannot tell, as process_owner() says.
  struct stat st {};
  bool known = ::stat(("/proc/" + std::to_string(pid)).c_str(), &st) == 0;
  meta["owner_uid"] = std::to_string(known ? st.st_uid : static_cast<uid_t>(-1));
  if (known) meta["owner_gid"] = std::to_string(st.st_gid);
  meta["files"] = criu::encode_files(tree);
  if (tree.shell_job()) meta["shell_job"] = "1";
  if (req.tcp_close) meta["tcp_close"] = "1";
  meta["cmdline"] = process_cmdline(pid);
  meta["kind"] = kind;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  meta["host"] = host;
  meta["created_unix_ns"] = std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                               std::chrono::system_clock::now().time_since_epoch())
                                               .count());
  if (auto gpu = Gpu::get()) {
    meta["driver_version"] = std::to_string((*gpu)->driver_version());
    for (int d = 0; d < (*gpu)->device_count(); ++d) {
      meta["gpu." + std::to_string(d) + ".name"] = (*gpu)->name(d);
      meta["gpu." + std::to_string(d) + ".uuid"] = (*gpu)->uuid(d);
    }
  }
  return meta;
}

// Note [gcrd owns lineage]: the parent is gcrd's record of this process, when the process's own
// claim agrees and the parent is still there and belongs to the process's owner; else none.
Result<std::optional<store::CheckpointId>> choose_parent(store::Store& store, const ProcessKey& key,
                                                         const std::string& claimed,
                                                         const Progress& progress) {
  auto recorded = lineage_last(key);
  if (!recorded) return std::optional<store::CheckpointId>();
  if (claimed != *recorded) {
    progress("process " + std::to_string(key.pid) + " says its last checkpoint was '" +
             claimed.substr(0, 64) + "', gcrd's record says " + recorded->substr(0, 12) +
             ": storing a full checkpoint");
    return std::optional<store::CheckpointId>();
  }
  auto id = store.resolve(*recorded);
  if (!id) return std::optional<store::CheckpointId>();
  GCR_TRY_ASSIGN(auto reader, store.open_checkpoint(*id));
  const std::string owner = reader->manifest().meta_or("owner_uid");
  if (owner != std::to_string(process_owner(key.pid))) {
    progress("checkpoint " + recorded->substr(0, 12) + " belongs to uid '" + owner +
             "', not to process " + std::to_string(key.pid) +
             "'s owner: storing a full checkpoint");
    return std::optional<store::CheckpointId>();
  }
  return std::optional<store::CheckpointId>(*id);
}

// Every process of the tree that runs under gcr says what stands in the way of its checkpoint
// (memory shared with other processes: Note [Virtual allocation handles]); any reason refuses the
// checkpoint here, before anything stops. The ranks of a job under its launcher are refused this
// way until gcr checkpoints shared memory: each would come back with a private copy.
Status check_tree_blockers(const criu::ProcessTree& tree) {
  std::string reasons;
  int sharing = 0;
  for (pid_t pid : tree.pids) {
    if (criu::maps_libcuda(pid) == false) continue;  // no CUDA driver: nothing to ask
    auto client = control::Client::connect(pid, std::chrono::seconds(2));
    if (!client) continue;  // not under gcr (the driver's checkpoint decides), or gone
    auto blockers = client->blockers();
    (void)client->close();
    if (!blockers || blockers->empty()) continue;  // nothing, or an interposer before 1.2
    if (++sharing > 2) continue;                   // the first two say enough
    std::string what = pid == tree.root ? "" : "process " + std::to_string(pid) + ": ";
    for (std::size_t i = 0; i < blockers->size(); ++i) what += (i ? ", " : "") + (*blockers)[i];
    reasons += (reasons.empty() ? "" : "; ") + what;
  }
  if (reasons.empty()) return ok();
  if (sharing > 2)
    reasons += "; and " + std::to_string(sharing - 2) + " more process(es) like them";
  return Error{Errc::unsupported,
               "cannot checkpoint process " + std::to_string(tree.root) + ": " + reasons +
                   ". gcr cannot checkpoint device memory shared between processes yet (each "
                   "would come back with a private copy)"};
}

// --stop-copy, the baseline (cuda-checkpoint + CRIU): no parking; the driver moves device memory
// into the process and CRIU dumps it all. Phases: prepare (the image directory), dump (undo: a
// driver lock a dead CRIU left is undone), store, commit.
Result<CheckpointReport> checkpoint_stop_copy(store::Store& store, const criu::Tools& tools,
                                              const CheckpointRequest& req,
                                              const criu::ProcessTree& tree,
                                              const Progress& progress, const std::string& kind) {
  CheckpointReport rep;
  rep.pid = req.pid;
  rep.kind = kind;
  Transaction tx("the --stop-copy checkpoint of process " + std::to_string(req.pid));
  auto t0 = Clock::now();
  std::optional<WorkDir> work;
  auto meta = base_meta(req.pid, kind, tree, req);  // before CRIU ends the process
  GCR_TRY(tx.run("prepare", [&]() -> Status {
    bool in_memory = false;
    GCR_TRY_ASSIGN(WorkDir w, WorkDir::create_for_dump(resident_bytes(tree.pids), &in_memory));
    work.emplace(std::move(w));
    rep.images_in = in_memory ? "memory" : "disk";
    return ok();
  }));
  GCR_TRY(tx.run("dump", [&]() -> Status {
    progress("dumping process " + std::to_string(req.pid) +
             " with CRIU (driver copies device memory to host)");
    auto td = Clock::now();
    // CRIU may die with the driver locked.
    tx.on_undo("the driver's lock", [&] { (void)ensure_cuda_running(req.pid); });
    auto args = tree.dump_arguments();
    if (req.tcp_close) args.push_back("--tcp-close");
    GCR_TRY(criu::dump(
        tools, {req.pid, work->path(), req.leave_running, false, driver_env(), std::move(args)}));
    record_phase(rep, "dump", td);
    if (!req.leave_running) return ok();
    GCR_TRY_ASSIGN(bool repaired, ensure_cuda_running(req.pid));
    if (repaired) {
      std::string w = "the CRIU plugin left process " + std::to_string(req.pid) +
                      "'s CUDA state locked or checkpointed after the dump (see the dump.log of "
                      "the checkpoint); gcrd restored and unlocked it";
      progress(w);
      rep.warnings.push_back(std::move(w));
    }
    return ok();
  }));
  record_phase(rep, "stall", t0);
  std::unique_ptr<store::CheckpointWriter> writer;
  GCR_TRY(tx.run("store", [&]() -> Status {
    auto ts = Clock::now();
    GCR_TRY_ASSIGN(writer, store.begin_checkpoint(meta, std::nullopt));
    for (const auto& entry : fs::recursive_directory_iterator(work->path())) {
      if (!entry.is_regular_file() || entry.path().filename() == "criu.out") continue;
      std::string rel = fs::relative(entry.path(), work->path()).string();
      auto perms = static_cast<std::uint32_t>(entry.status().permissions()) & 0777;
      GCR_TRY(writer->add_file(rel, perms, entry.path()).context("storing CRIU image file " + rel));
    }
    record_phase(rep, "store", ts);
    return ok();
  }));
  GCR_TRY(tx.run("commit", [&]() -> Status {
    record_phase(rep, "total", t0);
    for (const auto& [k, v] : rep.times_ns)
      writer->set_meta("timing." + k + "_ns", std::to_string(v));
    GCR_TRY_ASSIGN(store::CommitInfo info, writer->commit(req.tag));
    rep.id = info.id.hex();
    rep.stats = info.stats;
    return ok();
  }));
  tx.commit();
  return rep;
}

// What gcrd found of the job before anything stops (Note [Refused up front] in
// docs/processes.md): how to checkpoint it, and everything the transaction needs.
struct Inspection {
  enum class Route { gcr, stop_copy, none } route = Route::gcr;
  JobTrees trees;
  std::vector<Member> members;
  CheckpointPlan plan;
  ProcessKey key;
};

// Note [A job of several trees] (job.h): what a job of several trees is checkpointed with.
Status check_several_trees(const CheckpointRequest& req, const std::vector<pid_t>& roots,
                           std::string& job_scope) {
  if (req.stop_copy || req.external_criu || req.device_only || req.hold)
    return Error{Errc::unsupported,
                 "a job of several process trees (--job) is checkpointed by gcr alone: not with "
                 "--stop-copy, in a container or by gcr migrate"};
  job_scope = "the job's trees (processes";
  for (pid_t root : roots) job_scope += " " + std::to_string(root);
  job_scope += ")";
  return ok();
}

// The members' claims: what each says its last checkpoint was (one answer for the job, or none),
// and whether it registered host memory with the driver.
Status ask_members(std::vector<Member>& members, std::string& claimed,
                   std::vector<bool>& registered) {
  registered.assign(members.size(), false);
  for (std::size_t i = 0; i < members.size(); ++i) {
    GCR_TRY_ASSIGN(control::StatusInfo before, members[i].client.status());
    registered[i] = before.host_registered;
    if (i == 0)
      claimed = before.last_checkpoint;
    else if (claimed != before.last_checkpoint)
      claimed.clear();
  }
  return ok();
}

bool pinned_frozen_asked() {
  return settings().pinned_frozen;  // GCR_PINNED_FROZEN=1
}

// The manifest's META for a gcr checkpoint of the job.
std::map<std::string, std::string> job_meta(const CheckpointRequest& req, const Inspection& in) {
  auto meta = base_meta(req.pid, "gcr", in.trees.all, req);
  if (in.plan.job) meta["job_members"] = encode_job_members(in.plan.owners);
  if (in.plan.several_trees) {
    // The union says what the first tree's dump does not (another tree's outside terminal).
    if (in.trees.trees[0].shell_job())
      meta["shell_job"] = "1";
    else
      meta.erase("shell_job");
    meta["job_trees"] = encode_job_trees(in.trees);
    if (!in.trees.sockets.empty()) meta["job_sockets"] = encode_job_sockets(in.trees);
  }
  if (!in.trees.tcp.empty()) meta["job_tcp"] = encode_job_tcp(in.trees.tcp.connections);
  for (const auto& [k, v] : req.extra_meta) meta[k] = v;
  return meta;
}

// Note [TCP within a job] (job_tcp.h): gcr's own dump carries the connections whose two ends it
// takes (the driver's checkpoint and a runtime's CRIU do not); Note [A job across hosts]
// (job_link.h): those whose far end another host of the job holds too.
Status carry_connections(const CheckpointRequest& req, Inspection& in, bool external) {
  const bool gcr_dumps = !external && !req.stop_copy && !in.members.empty();
  if (req.link && !gcr_dumps)
    return Error{Errc::unsupported,
                 in.members.empty()
                     ? "process " + std::to_string(req.pid) +
                           " does not run under gcr: a rank of a job across hosts must (start it "
                           "with 'gcr run')"
                     : "a job across hosts is checkpointed by gcr itself, not by a runtime's CRIU "
                       "or --stop-copy"};
  if (!gcr_dumps || req.tcp_close) return ok();
  carry_tcp(in.trees);
  if (req.link) {
    GCR_TRY_ASSIGN(auto across, req.link->carried(outward_tcp(in.trees)));
    carry_tcp_listed(in.trees, across);
  }
  if (!in.trees.tcp.empty() && ::geteuid() != 0)
    return Error{Errc::permission_denied,
                 "process " + std::to_string(req.pid) + " holds " +
                     std::to_string(in.trees.tcp.connections.size()) +
                     " TCP connection(s) within the job, which only a gcrd running as root can "
                     "carry (CRIU's TCP repair and gcrd's lock need CAP_NET_ADMIN): run gcrd as "
                     "root, or checkpoint with --tcp-close"};
  return ok();
}

// Everything gcr must know, and may refuse, before the process is touched.
Result<Inspection> inspect_checkpoint(store::Store& store, const CheckpointRequest& req,
                                      const Progress& progress) {
  Inspection in;
  std::vector<pid_t> roots{req.pid};
  roots.insert(roots.end(), req.job_pids.begin(), req.job_pids.end());
  GCR_TRY(check_roots(roots));
  GCR_TRY_ASSIGN(in.trees, inspect_job_trees(roots));
  const criu::ProcessTree& tree = in.trees.all;
  const bool several_trees = in.trees.trees.size() > 1;
  std::string job_scope;
  if (several_trees) GCR_TRY(check_several_trees(req, roots, job_scope));
  GCR_TRY(check_tree_blockers(tree));
  GCR_TRY(wait_host_memory_restored(tree.pids, std::chrono::minutes(10), progress));
  // Note [Job checkpoint] (job.h): every process of the tree under gcr is a member. Memory shared
  // with a process outside the tree is the first thing to say (it explains the sockets too).
  if (!req.stop_copy) {
    GCR_TRY_ASSIGN(in.members, connect_members(tree, std::chrono::seconds(5)));
    GCR_TRY_ASSIGN(in.plan.shared, find_shared(in.members, tree, job_scope));
  }
  const bool external = req.external_criu || req.device_only;
  GCR_TRY(carry_connections(req, in, external));
  if (external && in.members.empty()) {
    // Not under gcr: the runtime's CRIU and the plugin's driver steps do it all (the baseline).
    in.route = Inspection::Route::none;
    return in;
  }
  if (!external)  // else the runtime chose CRIU's options (external mounts, its own stdio)
    for (const criu::ProcessTree& t : in.trees.trees)
      GCR_TRY(criu::check_supported(t, {req.tcp_close})
                  .context("cannot checkpoint process " + std::to_string(t.root)));
  if (req.stop_copy) {
    in.route = Inspection::Route::stop_copy;
    return in;
  }
  if (in.members.empty() && req.hold)
    return Error{Errc::unsupported,
                 "process " + std::to_string(req.pid) +
                     " is not running under gcr, and only gcr's own checkpoint can wait for a "
                     "migration to finish; start it with 'gcr run'"};
  if (in.members.empty() && several_trees)
    return Error{Errc::unsupported, "none of the processes of " + job_scope +
                                        " runs under gcr: start them with 'gcr run'"};
  if (in.members.empty()) {
    // Not under gcr: the driver's own checkpoint is all there is (DESIGN §4's baseline).
    progress("process " + std::to_string(req.pid) +
             " is not running under gcr: using the driver's checkpoint");
    in.route = Inspection::Route::stop_copy;
    return in;
  }
  CheckpointPlan& plan = in.plan;
  plan.roots = roots;
  plan.several_trees = several_trees;
  plan.cut_over_tcp = !in.trees.tcp.empty() || req.link;
  plan.job = in.members.size() > 1 || in.members[0].pid != tree.root || several_trees;
  plan.external = external;
  for (const Member& m : in.members) plan.owners.push_back(m.owner);
  std::string claimed;
  GCR_TRY(ask_members(in.members, claimed, plan.registered));
  plan.pinned_frozen = pinned_frozen_asked();
  auto key = process_key(req.pid);
  if (!key) return Error{Errc::not_found, "process " + std::to_string(req.pid) + " has exited"};
  in.key = *key;
  GCR_TRY_ASSIGN(plan.parent, choose_parent(store, *key, claimed, progress));
  plan.meta = job_meta(req, in);
  return in;
}

}  // namespace

Status check_roots(const std::vector<pid_t>& roots) {
  for (pid_t root : roots)
    if (root <= 0 || kill(root, 0) != 0) {
      if (errno == EPERM)
        return Error{Errc::permission_denied,
                     "process " + std::to_string(root) +
                         " belongs to another user; only root or its owner may checkpoint it"};
      return Error{Errc::not_found, "no process " + std::to_string(root)};
    } else if (auto state = criu::process_status_field(root, "State");
               state && (state->rfind("Z", 0) == 0 || state->rfind("X", 0) == 0)) {
      return Error{Errc::not_found, "process " + std::to_string(root) +
                                        " has exited (its parent has not reaped it yet)"};
    }
  return ok();
}

Result<CheckpointReport> checkpoint_process(store::Store& store, const criu::Tools& tools,
                                            const CheckpointRequest& req, const Progress& progress,
                                            WorkRegistry* work) {
  GCR_TRY_ASSIGN(Inspection in, inspect_checkpoint(store, req, progress));
  if (in.route == Inspection::Route::none) {
    CheckpointReport none;
    none.pid = req.pid;
    none.kind = "none";
    return none;
  }
  if (in.route == Inspection::Route::stop_copy)
    return checkpoint_stop_copy(store, tools, req, in.trees.all, progress, "stop-copy");
  GCR_TRY_ASSIGN(Gpu * gpu, Gpu::get());
  MemberSessions sessions(in.members, in.plan.shared, in.trees.tcp, req.link, *gpu);
  // Note [Host memory tracked between checkpoints]: host memory pinned for DMA, per member, asked
  // now (a member that cannot say is not tracked at all) and again once the GPU is idle (parked).
  GCR_TRY_ASSIGN(in.plan.pinned, ask_pinned(sessions, in.plan.registered, in.plan.pinned_frozen));
  std::vector<pid_t> member_pids;
  for (const Member& m : in.members) member_pids.push_back(m.pid);
  ProcessKeepers keepers;
  GpuHolder device(*gpu);
  std::optional<CriuDumper> criu;
  std::optional<RuntimeDumper> runtime;
  Dumper* dumper = nullptr;
  if (in.plan.external)
    dumper = &runtime.emplace(req);
  else {
    dumper = &criu.emplace(tools, req, in.trees, in.key, std::move(member_pids));
    criu->tell_keepers([&keepers](const std::string& lines) { keepers.say(lines); });
  }
  const ProcessKey key = in.key;
  StoreOf checkpoint_store(store);
  CheckpointPorts ports{checkpoint_store, sessions,
                        keepers,          *dumper,
                        device,           [key](const std::string& id) { lineage_record(key, id); },
                        progress,         [](const char* point) { pause_point(point); }};
  const std::vector<pid_t> pids = [&] {
    std::vector<pid_t> out;
    for (const Member& m : in.members) out.push_back(m.pid);
    return out;
  }();
  CheckpointTransaction tx(req, std::move(in.plan), ports);
  if (work)
    tx.transaction().set_observer([&tx, &pids, work](const std::string& phase) {
      for (pid_t pid : pids)
        if (phase == "committed" || phase == "aborted")
          work->erase(pid);
        else
          work->set(pid, {"checkpoint", phase, tx.process_state()});
    });
  Status done = tx.prepare();
  if (done) done = req.decide ? req.decide(tx) : tx.commit();
  if (!done) {
    std::string journal;
    for (const std::string& line : tx.transaction().journal()) journal += "\n  " + line;
    std::fprintf(stderr, "gcrd: the checkpoint of process %d failed:%s\n", req.pid,
                 journal.c_str());
    return std::move(done).error();
  }
  return tx.report();
}

}  // namespace gcr::gcrd
