// The checkpoint protocol (checkpoint.h). Every failure before the CRIU dump leaves the process
// running: a parked process is unparked and resumed, a quiesced one resumed.
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

#include "device.h"
#include "drain.h"
#include "gcr/control.h"
#include "gcr/process_tree.h"
#include "gcrd_protocol.h"
#include "host_tracking.h"
#include "job.h"
#include "keeper.h"
#include "lineage.h"
#include "pause_point.h"
#include "phase_clock.h"
#include "restore.h"
#include "work_dir.h"

namespace gcr::gcrd {
namespace fs = std::filesystem;

namespace {

Error with_context(Error e, const std::string& what) {
  e.message = what + ": " + e.message;
  return e;
}

// Comma-separated hex addresses, each once, in order (META touch_order, read by restore.cpp).
std::string format_touch_order(const std::vector<std::uint64_t>& order) {
  std::string out;
  std::set<std::uint64_t> seen;
  for (std::uint64_t a : order) {
    if (!seen.insert(a).second) continue;
    char b[24];
    std::snprintf(b, sizeof b, "%s%llx", out.empty() ? "" : ",",
                  static_cast<unsigned long long>(a));
    out += b;
  }
  return out;
}

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

Status store_criu_images(store::CheckpointWriter& w, const fs::path& dir) {
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::string rel = fs::relative(entry.path(), dir).string();
    if (entry.path().filename() == "criu.out") continue;  // gcr's capture of CRIU's output
    auto perms = static_cast<std::uint32_t>(entry.status().permissions()) & 0777;
    GCR_TRY(w.add_file(rel, perms, entry.path()).context("storing CRIU image file " + rel));
  }
  return ok();
}

std::vector<std::string> dump_arguments(const criu::ProcessTree& tree,
                                        const CheckpointRequest& req) {
  auto args = tree.dump_arguments();
  if (req.tcp_close) args.push_back("--tcp-close");
  return args;
}

// After a failed dump or store: undoes a driver lock CRIU may have left (it died, or crashed),
// then maps the parked regions back and lets the process run. False if it could not be reached.
bool give_memory_back(pid_t pid, const std::vector<control::ParkedRegion>& parked) {
  (void)ensure_cuda_running(pid);
  auto again = control::Client::connect(pid, std::chrono::seconds(10));
  if (!again) return false;
  Status unparked = again->unpark(parked);
  (void)again->resume();
  (void)again->close();
  return static_cast<bool>(unparked);
}

// After a --leave-running dump: the process must be able to make CUDA calls again.
Status check_resumed(pid_t pid, CheckpointReport& rep, const Progress& progress) {
  GCR_TRY_ASSIGN(bool repaired, ensure_cuda_running(pid));
  if (repaired) {
    std::string w = "the CRIU plugin left process " + std::to_string(pid) +
                    "'s CUDA state locked or checkpointed after the dump (see the dump.log of "
                    "the checkpoint); gcrd restored and unlocked it";
    progress(w);
    rep.warnings.push_back(std::move(w));
  }
  return ok();
}

// The stop-copy baseline: the driver moves device memory into the process, CRIU dumps it all.
Result<CheckpointReport> checkpoint_stop_copy(store::Store& store, const criu::Tools& tools,
                                              const CheckpointRequest& req,
                                              const criu::ProcessTree& tree,
                                              const Progress& progress, const std::string& kind) {
  CheckpointReport rep;
  rep.pid = req.pid;
  rep.kind = kind;
  auto t0 = Clock::now();
  bool in_memory = false;
  GCR_TRY_ASSIGN(WorkDir work, WorkDir::create_for_dump(resident_bytes(tree.pids), &in_memory));
  rep.images_in = in_memory ? "memory" : "disk";
  auto meta = base_meta(req.pid, kind, tree, req);
  progress("dumping process " + std::to_string(req.pid) +
           " with CRIU (driver copies device memory to host)");
  auto td = Clock::now();
  if (Status dumped = criu::dump(tools, {req.pid, work.path(), req.leave_running, false,
                                         driver_env(), dump_arguments(tree, req)});
      !dumped) {
    (void)ensure_cuda_running(req.pid);  // CRIU may have died with the driver locked
    return std::move(dumped).error();
  }
  record_phase(rep, "dump", td);
  if (req.leave_running) GCR_TRY(check_resumed(req.pid, rep, progress));
  record_phase(rep, "stall", t0);
  auto ts = Clock::now();
  GCR_TRY_ASSIGN(auto writer, store.begin_checkpoint(meta, std::nullopt));
  GCR_TRY(store_criu_images(*writer, work.path()));
  record_phase(rep, "store", ts);
  record_phase(rep, "total", t0);
  for (const auto& [k, v] : rep.times_ns)
    writer->set_meta("timing." + k + "_ns", std::to_string(v));
  GCR_TRY_ASSIGN(store::CommitInfo info, writer->commit(req.tag));
  rep.id = info.id.hex();
  rep.stats = info.stats;
  return rep;
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

}  // namespace

uid_t process_owner(pid_t pid) {
  struct stat st {};
  std::string p = "/proc/" + std::to_string(pid);
  return ::stat(p.c_str(), &st) == 0 ? st.st_uid : static_cast<uid_t>(-1);
}

std::string process_cmdline(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

// Whether process `pid` is gone (or a zombie), runs on untraced, or is still CRIU's.
enum class AfterDump { gone, running, traced };
AfterDump after_dump(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  if (!in) return AfterDump::gone;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("State:", 0) == 0 && line.find('Z') != std::string::npos) return AfterDump::gone;
    if (line.rfind("TracerPid:", 0) == 0)
      return std::atoi(line.c_str() + 10) == 0 ? AfterDump::running : AfterDump::traced;
  }
  return AfterDump::gone;
}

// Note [CRIU run by someone else]: the device memory is committed; the runtime's CRIU dumps now.
template <typename GiveBack, typename Done>
Status finish_external_dump(const CheckpointRequest& req, store::Store& store,
                            const store::CheckpointId& id, CheckpointReport& rep,
                            GiveBack& give_all_back, Done& keepers_done, const Progress& progress) {
  auto t = Clock::now();
  Result<bool> dumped = req.external_criu(id.hex());
  if (!dumped || !*dumped) {
    give_all_back();
    (void)store.remove(id);  // device memory without a CRIU image of its process
    if (!dumped) return std::move(dumped).context("the runtime's CRIU").error();
    return Error{Errc::io_error, "the runtime's CRIU failed to dump process " +
                                     std::to_string(req.pid) +
                                     " (see its log); the process runs on"};
  }
  record_phase(rep, "dump", t);
  // CRIU ends or lets go of the tasks right after the plugin's exit hook.
  auto deadline = Clock::now() + std::chrono::seconds(60);
  AfterDump state = after_dump(req.pid);
  while (state == AfterDump::traced && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    state = after_dump(req.pid);
  }
  if (state == AfterDump::gone) {
    keepers_done();
    record_phase(rep, "stall", t);
    return ok();
  }
  rep.kept_running = true;
  progress("the runtime left process " + std::to_string(req.pid) +
           " running: giving it its device memory back");
  if (!give_all_back())
    return Error{Errc::io_error, "process " + std::to_string(req.pid) +
                                     " ran on after its dump but did not take its device memory "
                                     "back; its keeper ends it"};
  return ok();
}

namespace {

// Note [Host memory tracked between checkpoints] (host_tracking.h): what the members pinned for
// DMA and gcrd must take care of. `untrackable`: a member that cannot say (a 1.3 interposer whose
// status says it registered host memory, or more ranges than it keeps). A 1.5 interposer writes
// pinned pages itself before a device may (Note [Device writes to pinned host memory] in
// interpose/pinned.h): its ranges need nothing (`touched_bytes`), unless GCR_PINNED_FROZEN=1 asks
// for the care anyway (for a program whose kernels write pinned memory through pointers stored in
// device memory).
struct PinnedHostMemory {
  std::map<pid_t, std::vector<control::HostDmaRange>> ranges;
  pid_t untrackable = 0;
  std::uint64_t touched_bytes = 0;
};
bool pinned_frozen_asked() {
  const char* v = std::getenv("GCR_PINNED_FROZEN");
  return v && std::string_view(v) == "1";
}
Result<PinnedHostMemory> pinned_host_memory(std::vector<Member>& members,
                                            const std::vector<bool>& registered) {
  PinnedHostMemory out;
  for (std::size_t i = 0; i < members.size(); ++i) {
    auto dma = members[i].client.host_dma();
    if (!dma && dma.error().code != Errc::unsupported) return std::move(dma).error();
    if (dma && dma->touched && !pinned_frozen_asked()) {  // its own table has no cap
      for (const control::HostDmaRange& r : dma->ranges) out.touched_bytes += r.bytes;
    } else if (dma && !dma->overflow) {
      if (!dma->ranges.empty()) out.ranges[members[i].pid] = std::move(dma->ranges);
    } else if (registered[i] || dma) {
      out.untrackable = members[i].pid;
    }
  }
  return out;
}

// CRIU's --cow-dma file (gcr/criu.h): "PID START END" per range; with no ranges known, all of
// every member's memory (copied in the freeze, as without --cow-dump).
Status write_dma_file(int fd, const std::vector<Member>& members,
                      const std::map<pid_t, std::vector<control::HostDmaRange>>* ranges) {
  std::string text;
  char line[64];
  for (const Member& m : members) {
    if (!ranges) {
      std::snprintf(line, sizeof line, "%d 0 100000000000000\n", static_cast<int>(m.pid));
      text += line;
      continue;
    }
    auto it = ranges->find(m.pid);
    if (it == ranges->end()) continue;
    for (const control::HostDmaRange& r : it->second) {
      std::snprintf(line, sizeof line, "%d %llx %llx\n", static_cast<int>(m.pid),
                    static_cast<unsigned long long>(r.address),
                    static_cast<unsigned long long>(r.address + r.bytes));
      text += line;
    }
  }
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    return errno_error("writing the file of pinned host memory for CRIU");
  return ok();
}

// Lets a tree CRIU left stopped (--leave-stopped) run again, every task of it.
void continue_tree(pid_t root) {
  for (pid_t p : criu::tree_pids(root)) kill(p, SIGCONT);
}

// Note [A job of several trees] (job.h): tree k's dump, which leaves its tasks stopped.
Result<criu::DumpOptions> tree_dump_options(const criu::DumpOptions& common, const JobTrees& job,
                                            const CheckpointRequest& req, std::size_t k) {
  criu::DumpOptions o = common;
  o.pid = job.trees[k].root;
  o.leave_running = false;
  o.leave_stopped = true;
  o.cow_dump = false;
  o.extra_args = dump_arguments(job.trees[k], req);
  for (std::string& a : cross_socket_arguments(job, k)) o.extra_args.push_back(std::move(a));
  if (k > 0) {
    o.image_dir = common.image_dir / tree_images_dir(innermost_pid(o.pid));
    std::error_code ec;
    if (!fs::create_directories(o.image_dir, ec) && ec)
      return Error{Errc::io_error, "creating " + o.image_dir.string() + ": " + ec.message()};
  }
  return o;
}

// Ibid.: one CRIU dump per tree (`started`: each CRIU started before the cut, else started
// here), each leaving its tasks stopped; then, with all of them stopped, nothing may be in flight
// between them. A failure lets every tree dumped so far go on (stopped tasks would not answer gcrd
// giving their memory back); the CRIUs not let go end with nothing frozen.
Status dump_trees(const criu::Tools& tools, const criu::DumpOptions& common, const JobTrees& job,
                  const CheckpointRequest& req, std::vector<criu::StartedDump>& started) {
  auto let_go = [&](std::size_t dumped) {
    for (std::size_t k = 0; k < dumped; ++k) continue_tree(job.trees[k].root);
  };
  for (std::size_t k = 0; k < job.trees.size(); ++k) {
    Status s = ok();
    if (k < started.size()) {
      s = started[k].go_and_wait();
    } else if (auto o = tree_dump_options(common, job, req, k)) {
      s = criu::dump(tools, *o);
    } else {
      s = std::move(o).error();
    }
    if (!s) {
      let_go(k);
      started.clear();
      return std::move(s).context("dumping the tree of process " +
                                  std::to_string(job.trees[k].root));
    }
  }
  started.clear();
  if (Status s = check_nothing_in_flight(job); !s) {
    let_go(job.trees.size());
    return s;
  }
  return ok();
}

}  // namespace

Result<CheckpointReport> checkpoint_process(store::Store& store, const criu::Tools& tools,
                                            const CheckpointRequest& req,
                                            const Progress& progress) {
  std::vector<pid_t> roots{req.pid};
  roots.insert(roots.end(), req.job_pids.begin(), req.job_pids.end());
  for (pid_t root : roots)
    if (root <= 0 || kill(root, 0) != 0) {
      if (errno == EPERM)
        return Error{Errc::permission_denied,
                     "process " + std::to_string(root) +
                         " belongs to another user; only root or its owner may checkpoint it"};
      return Error{Errc::not_found, "no process " + std::to_string(root)};
    }
  // Note [Refused up front] (docs/processes.md): what the tree holds is read, and anything gcr
  // cannot restore correctly refused, before the process is touched.
  // Note [A job of several trees] (job.h): with --job, every root's tree; else pid's alone.
  GCR_TRY_ASSIGN(JobTrees job_trees, inspect_job_trees(roots));
  const criu::ProcessTree& tree = job_trees.all;
  const bool several_trees = job_trees.trees.size() > 1;
  std::string job_scope;
  if (several_trees) {
    if (req.stop_copy || req.external_criu || req.device_only || req.hold)
      return Error{Errc::unsupported,
                   "a job of several process trees (--job) is checkpointed by gcr alone: not with "
                   "--stop-copy, in a container or by gcr migrate"};
    job_scope = "the job's trees (processes";
    for (pid_t root : roots) job_scope += " " + std::to_string(root);
    job_scope += ")";
  }
  GCR_TRY(check_tree_blockers(tree));
  GCR_TRY(wait_host_memory_restored(tree.pids, std::chrono::minutes(10), progress));
  // Note [Job checkpoint] (job.h): every process of the tree under gcr is a member. Memory shared
  // with a process outside the tree is the first thing to say (it explains the sockets too).
  std::vector<Member> members;
  std::vector<SharedAllocation> shared;
  if (!req.stop_copy) {
    GCR_TRY_ASSIGN(members, connect_members(tree, std::chrono::seconds(5)));
    GCR_TRY_ASSIGN(shared, find_shared(members, tree, job_scope));
  }
  const bool external = req.external_criu || req.device_only;
  if (external && members.empty()) {
    // Not under gcr: the runtime's CRIU and the plugin's driver steps do it all (the baseline).
    CheckpointReport none;
    none.pid = req.pid;
    none.kind = "none";
    return none;
  }
  if (!external)  // else the runtime chose CRIU's options (external mounts, its own stdio)
    for (const criu::ProcessTree& t : job_trees.trees)
      GCR_TRY(criu::check_supported(t, {req.tcp_close})
                  .context("cannot checkpoint process " + std::to_string(t.root)));
  if (req.stop_copy) return checkpoint_stop_copy(store, tools, req, tree, progress, "stop-copy");
  if (members.empty() && req.hold)
    return Error{Errc::unsupported,
                 "process " + std::to_string(req.pid) +
                     " is not running under gcr, and only gcr's own checkpoint can wait for a "
                     "migration to finish; start it with 'gcr run'"};
  if (members.empty() && several_trees)
    return Error{Errc::unsupported, "none of the processes of " + job_scope +
                                        " runs under gcr: start them with 'gcr run'"};
  if (members.empty()) {
    // Not under gcr: the driver's own checkpoint is all there is (DESIGN §4's baseline).
    progress("process " + std::to_string(req.pid) +
             " is not running under gcr: using the driver's checkpoint");
    return checkpoint_stop_copy(store, tools, req, tree, progress, "stop-copy");
  }
  const bool job = members.size() > 1 || members[0].pid != tree.root || several_trees;
  CheckpointReport rep;
  rep.pid = req.pid;
  rep.kind = "gcr";
  rep.processes = members.size();
  rep.shared_regions = shared.size();
  // What the members say their last checkpoint was: one answer for the job, or none.
  std::string claimed;
  // Note [Host memory tracked between checkpoints]: host memory pinned for DMA, per member, asked
  // now (a member that cannot say is not tracked at all) and again once the GPU is idle (parked).
  std::vector<bool> registered(members.size());
  for (std::size_t i = 0; i < members.size(); ++i) {
    GCR_TRY_ASSIGN(control::StatusInfo before, members[i].client.status());
    registered[i] = before.host_registered;
    if (i == 0)
      claimed = before.last_checkpoint;
    else if (claimed != before.last_checkpoint)
      claimed.clear();
  }

  GCR_TRY_ASSIGN(PinnedHostMemory host_dma, pinned_host_memory(members, registered));

  auto key = process_key(req.pid);
  if (!key) return Error{Errc::not_found, "process " + std::to_string(req.pid) + " has exited"};
  GCR_TRY_ASSIGN(std::optional<store::CheckpointId> parent,
                 choose_parent(store, *key, claimed, progress));
  auto meta = base_meta(req.pid, "gcr", tree, req);
  if (job) {
    std::vector<std::string> owners;
    for (const Member& m : members) owners.push_back(m.owner);
    meta["job_members"] = encode_job_members(owners);
  }
  if (several_trees) {
    // The union says what the first tree's dump does not (another tree's outside terminal).
    if (job_trees.trees[0].shell_job())
      meta["shell_job"] = "1";
    else
      meta.erase("shell_job");
    meta["job_trees"] = encode_job_trees(job_trees);
    if (!job_trees.sockets.empty()) meta["job_sockets"] = encode_job_sockets(job_trees);
  }
  // Before the cut, so that waiting for the store (a long `gcr image gc` holds gc.lock) never
  // stalls the process: it runs on until everything the checkpoint needs is in hand.
  GCR_TRY_ASSIGN(auto writer, store.begin_checkpoint(meta, parent));
  if (external) writer->set_meta("criu_images", "external");
  // Note [Dumping into memory]: CRIU writes host memory there while the process is frozen.
  bool in_memory = false;
  std::optional<WorkDir> work;
  if (!external) {
    GCR_TRY_ASSIGN(WorkDir w, WorkDir::create_for_dump(resident_bytes(tree.pids), &in_memory));
    work.emplace(std::move(w));
  }
  rep.images_in = external ? "runtime" : in_memory ? "memory" : "disk";

  // Without --leave-running the process is not ended by CRIU but left stopped, and ended only
  // once its checkpoint is committed: should anything fail before that (gcrd included: see
  // gcr-keeper), the process goes on instead of being lost with its checkpoint.
  const bool end_after_commit = !req.leave_running && !external;
  criu::DumpOptions dump_options{req.pid,           work ? work->path() : std::filesystem::path(),
                                 req.leave_running, end_after_commit,
                                 driver_env(),      dump_arguments(tree, req)};
  dump_options.cow_dump = true;  // Note [Pages written after the resume] (gcr/criu.h)
  // Ibid.: pinned host memory, written after park, read by CRIU in the freeze.
  UniqueFd dma_file;
  if (!external && req.leave_running && tools.cow_dma && !several_trees) {
    dma_file.reset(::memfd_create("gcr-cow-dma", MFD_CLOEXEC));
    if (!dma_file) return errno_error("creating the file of pinned host memory for CRIU");
    dump_options.cow_dma_fd = dma_file.get();
  }
  // Note [Host memory tracked between checkpoints] (host_tracking.h): a failure to set it up
  // only makes this dump a full one.
  std::optional<TrackedDump> tracking;
  if (!external && req.leave_running && tools.cow_track && !several_trees) {
    if (host_dma.untrackable) {
      HostTracking::instance().forget(*key);  // its userfaultfds close: the protection ends
      progress("host memory is not tracked between checkpoints: process " +
               std::to_string(host_dma.untrackable) +
               " pinned host memory with the driver (which devices write past write "
               "protection) and cannot say where");
    } else if (auto t = HostTracking::instance().begin(*key)) {
      tracking.emplace(std::move(t).value());
      dump_options.cow_track_socket = tracking->criu_socket();
      if (tracking->parent_images()) dump_options.prev_images = *tracking->parent_images();
    }
  }
  // Note [CRIU started before the cut] (gcr/criu.h); GCR_CRIU_EARLY=0 starts it after the park,
  // as gcr did before (bench/ckpt_bench.py compares the two).
  std::optional<criu::StartedDump> early;
  std::vector<criu::StartedDump> early_trees;  // Note [A job of several trees]: one per tree
  const auto t_begin = Clock::now();  // the total includes CRIU's start; the stall does not
  const char* early_env = std::getenv("GCR_CRIU_EARLY");
  const bool start_early = !external && (!early_env || std::string_view(early_env) != "0");
  const auto wait_limit = std::chrono::duration_cast<std::chrono::seconds>(req.quiesce_timeout) +
                          std::chrono::seconds(30);  // CRIU's --timeout: the cut and park too
  if (start_early && several_trees) {
    for (std::size_t k = 0; k < job_trees.trees.size(); ++k) {
      GCR_TRY_ASSIGN(criu::DumpOptions o, tree_dump_options(dump_options, job_trees, req, k));
      GCR_TRY_ASSIGN(criu::StartedDump started, criu::StartedDump::start(tools, o, wait_limit));
      early_trees.push_back(std::move(started));
    }
    progress("starting CRIU for each of the job's " + std::to_string(job_trees.trees.size()) +
             " trees");
    for (criu::StartedDump& d : early_trees) GCR_TRY(d.wait_ready(std::chrono::seconds(30)));
    record_phase(rep, "criu_start", t_begin);
  }
  if (start_early && !several_trees) {
    GCR_TRY_ASSIGN(criu::StartedDump started,
                   criu::StartedDump::start(tools, dump_options, wait_limit));
    early.emplace(std::move(started));
    progress("starting CRIU");
    GCR_TRY(early->wait_ready(std::chrono::seconds(30)));
    record_phase(rep, "criu_start", t_begin);
  }

  auto t0 = Clock::now();
  if (!shared.empty()) {
    auto tc = Clock::now();
    GCR_TRY(reach_cut(members, shared, req.quiesce_timeout, progress));
    record_phase(rep, "cut", tc);
  }
  progress(job ? "quiescing " + std::to_string(members.size()) + " processes of job " +
                     std::to_string(req.pid)
               : "quiescing process " + std::to_string(req.pid));
  if (Status q = quiesce_members(members, req.quiesce_timeout); !q) {
    end_cut(members);
    return std::move(q).context("quiescing process " + std::to_string(req.pid)).error();
  }
  end_cut(members);  // launches held by the cut now wait at the closed gate
  record_phase(rep, "quiesce", t0);
  pause_point("quiesced");
  // Note [First-touch order]: what the process touched first since its last cut; with
  // --leave-running, what it touches first after this one is put before it at the end.
  std::vector<std::uint64_t> touch_order;
  if (auto order = members[0].client.touch_order()) touch_order = std::move(order).value();
  auto resume_all = [&](Error e) -> Error {
    for (Member& m : members) (void)m.client.resume();
    return e;
  };
  auto tp = Clock::now();
  std::vector<std::vector<control::ParkedRegion>> parked(members.size());
  std::size_t parked_members =
      0;  // members[0, parked_members) are parked (with or without regions)
  // Gives every parked member its regions back; whether all took them.
  auto unpark_parked = [&] {
    bool all = true;
    for (std::size_t i = 0; i < parked_members; ++i)
      all &= static_cast<bool>(members[i].client.unpark(parked[i]));
    return all;
  };
  for (std::size_t i = 0; i < members.size(); ++i, ++parked_members) {
    auto p = members[i].client.park();
    if (!p) {
      unpark_parked();
      return resume_all(with_context(
          std::move(p).error(),
          job ? "parking process " + std::to_string(members[i].pid) : std::string("parking")));
    }
    parked[i] = std::move(p).value();
  }
  record_phase(rep, "park", tp);
  auto unpark_on_error = [&](Error e) -> Error {
    unpark_parked();
    return resume_all(std::move(e));
  };
  // Note [Parked memory outlives gcrd]: from here until each member has its memory back.
  std::vector<Keeper> keepers;
  // Note [A job of several trees]: every tree's dump leaves it stopped; any keeper continues them.
  const std::vector<pid_t> stopped_roots = several_trees ? roots : std::vector<pid_t>{};
  for (std::size_t i = 0; i < members.size(); ++i) {
    auto keeper = Keeper::start(members[i].pid, parked[i], stopped_roots);
    if (!keeper)
      return unpark_on_error(with_context(std::move(keeper).error(),
                                          "protecting the parked memory against gcrd's death"));
    keepers.push_back(std::move(keeper).value());
  }
  auto keepers_done = [&] {
    for (Keeper& k : keepers) k.done();
  };
  // A view of a shared allocation other than the one stored: (member, address) -> stored view.
  std::map<std::pair<std::size_t, std::uint64_t>, std::pair<std::size_t, std::uint64_t>> view_of;
  for (const SharedAllocation& a : shared)
    for (std::size_t v = 1; v < a.views.size(); ++v)
      view_of[{a.views[v].member, a.views[v].address}] = {a.views[0].member, a.views[0].address};
  std::set<std::pair<std::size_t, std::uint64_t>> shared_at;  // every view, stored or not
  for (const SharedAllocation& a : shared)
    for (const View& v : a.views) shared_at.insert({v.member, v.address});
  auto is_shared = [&](std::size_t m, std::uint64_t address) {
    return shared_at.contains({m, address});
  };

  GCR_TRY_ASSIGN(Gpu * gpu, Gpu::get());
  // The memory is back where it belongs: the keepers have nothing left to protect.
  auto unpark_kept_on_error = [&](Error e) -> Error {
    if (unpark_parked()) keepers_done();
    return resume_all(std::move(e));
  };
  // Import every region into gcrd (a shared allocation once): it is how gcrd reads them, and
  // holds them.
  std::map<std::pair<std::size_t, std::uint64_t>, std::size_t> parked_at;
  for (std::size_t i = 0; i < members.size(); ++i)
    for (std::size_t j = 0; j < parked[i].size(); ++j)
      parked_at[{i, parked[i][j].region.address}] = j;
  // Note [Shared memory written job-wide] (interpose/regions.h): a shared allocation no view
  // wrote since the parent comes from the parent, under the view it was stored as there; the
  // rest are stored whole. The stored views (member, address) whose allocation must be stored:
  std::set<std::pair<std::size_t, std::uint64_t>> shared_to_write;
  {
    std::set<std::tuple<std::string, std::uint64_t, std::uint32_t, std::uint64_t>> in_parent;
    if (parent)
      if (auto pr = store.open_checkpoint(*parent))
        for (const auto& o : (*pr)->manifest().objects)
          if (o.kind == store::ObjectKind::device_region)
            in_parent.insert({o.name, o.address, o.device, o.size});
    for (const SharedAllocation& a : shared) {
      bool written = false;
      for (const View& v : a.views)
        if (auto at = parked_at.find({v.member, v.address}); at != parked_at.end())
          written |= (parked[v.member][at->second].region.flags & control::kRegionDirty) != 0;
        else
          written = true;
      const View& stored = a.views[0];
      auto at = parked_at.find({stored.member, stored.address});
      if (!written && at != parked_at.end()) {
        const auto& r = parked[stored.member][at->second].region;
        written = !in_parent.contains({members[stored.member].owner, r.address, r.device, r.size});
      }
      if (written) shared_to_write.insert({stored.member, stored.address});
    }
  }
  // Whether member m's region r is stored by this checkpoint (else it comes from the parent).
  auto must_store = [&](std::size_t m, const control::RegionRecord& r) {
    if (is_shared(m, r.address)) return shared_to_write.contains({m, r.address});
    return (r.flags & control::kRegionDirty) || !parent;
  };
  std::vector<std::vector<std::optional<MappedAllocation>>> held(members.size());
  for (std::size_t i = 0; i < members.size(); ++i) {
    held[i].resize(parked[i].size());
    for (std::size_t j = 0; j < parked[i].size(); ++j) {
      const auto& p = parked[i][j];
      if (auto v = view_of.find({i, p.region.address}); v != view_of.end()) {
        auto stored = parked_at.find(v->second);
        if (stored == parked_at.end() ||
            parked[v->second.first][stored->second].region.size != p.region.size)
          return unpark_kept_on_error(
              Error{Errc::unsupported, "process " + std::to_string(members[i].pid) +
                                           " maps part of an allocation shared with process " +
                                           std::to_string(members[v->second.first].pid) + " at " +
                                           hex_address(p.region.address) +
                                           "; gcr restores shared memory mapped whole only"});
        continue;  // stored once, from the view it is stored under
      }
      auto m = MappedAllocation::import(p.fd.get(), p.region.size);
      if (!m)
        return unpark_kept_on_error(with_context(
            std::move(m).error(), "importing region " + hex_address(p.region.address)));
      held[i][j].emplace(std::move(m).value());
      ++rep.regions;
      rep.region_bytes += p.region.size;
      if (must_store(i, p.region)) rep.dirty_bytes += p.region.size;
    }
  }
  pause_point("parked");
  if (tracking ||
      dma_file) {  // the ranges as they are with the GPU idle: none change until it runs
    auto now = pinned_host_memory(members, registered);
    const bool known = now && !now->untrackable;
    if (known) host_dma = std::move(now).value();
    if (tracking && !known) {
      tracking.reset();
      HostTracking::instance().forget(*key);
      dump_options.cow_track_socket = -1;  // CRIU sees the socket end: a full dump
      dump_options.prev_images.clear();
    }
    if (dma_file)
      if (Status s = write_dma_file(dma_file.get(), members, known ? &host_dma.ranges : nullptr);
          !s)
        return unpark_kept_on_error(std::move(s).error());
  }
  std::string id = writer->id().hex();
  for (Member& m : members) {
    if (Status s = m.client.new_epoch(id); !s) return unpark_kept_on_error(std::move(s).error());
  }
  for (Member& m : members)
    if (Status s = m.client.close(); !s) return unpark_kept_on_error(std::move(s).error());

  if (!external)
    progress("dumping process " + std::to_string(req.pid) + " with CRIU (device memory parked)");
  auto td = Clock::now();
  // Note [CRIU run by someone else]: its dump comes after the store.
  // Note [Pages written after the resume] (gcr/criu.h): a CRIU that writes the pages after the
  // process runs again has let it go before it ends; it is waited for before its images are stored.
  bool criu_running = false;
  Status dumped = ok();
  rep.host_pinned_touched_bytes = host_dma.touched_bytes;
  if (tracking && !tracking->hand_in(host_dma.ranges, &rep.host_pages_pinned)) {
    // CRIU sees the socket end: a full dump
    tracking.reset();
    dump_options.cow_track_socket = -1;  // a CRIU not started yet (GCR_CRIU_EARLY=0) gets none
    dump_options.prev_images.clear();
  }
  if (early && req.leave_running && tools.cow_dump)
    criu_running = early->go_until_released(&dumped);
  else if (several_trees)
    dumped = dump_trees(tools, dump_options, job_trees, req, early_trees);
  else if (!external)
    dumped = early ? early->go_and_wait() : criu::dump(tools, dump_options);
  record_phase(rep, "dump", td);
  auto criu_finished = [&]() -> Status {
    if (!criu_running) return ok();
    criu_running = false;
    auto tw = Clock::now();
    Status s = early->go_and_wait();
    record_phase(rep, "dump_write", tw);
    return s;
  };
  // Gives every member its parked memory back and lets it run.
  auto give_all_back = [&] {
    bool all = true;
    for (std::size_t i = 0; i < members.size(); ++i)
      all &= give_memory_back(members[i].pid, parked[i]);
    if (all) keepers_done();
    return all;
  };
  if (!dumped) {
    // CRIU has ended: whatever it was handed is served again, or its protection ends, before
    // anything waits on the process (which may wait on a protected page).
    tracking.reset();
    // CRIU's plugin unlocks the process when a dump fails — unless CRIU itself died (killed, or
    // crashed), which leaves the driver locked: undo that first, then give the parked memory back.
    give_all_back();
    return std::move(dumped).error();
  }
  pause_point("dumped");
  if (req.leave_running && several_trees) {
    // Every tree was left stopped by its dump: on with all of them, as one.
    for (pid_t root : roots) continue_tree(root);
    for (const Member& m : members) GCR_TRY(ensure_cuda_running(m.pid));
  } else if (req.leave_running) {
    for (const Member& m : members) GCR_TRY(check_resumed(m.pid, rep, progress));
  }
  // The regions this checkpoint stores; the rest come from the parent. A shared allocation some
  // view wrote is stored whole: before any member runs, or behind every view's entry (below).
  std::vector<std::vector<DrainRegion>> to_store(members.size());
  std::vector<DrainRegion> shared_to_store;
  // Every view (member, address) of each of them, the stored one first.
  std::vector<std::vector<std::pair<std::size_t, std::uint64_t>>> shared_views_of;
  std::string views_meta;
  {
    std::vector<SharedView> views;
    for (const auto& [view, stored] : view_of)
      views.push_back(
          {members[view.first].owner, view.second, members[stored.first].owner, stored.second});
    views_meta = encode_shared_views(views);
  }
  // Gives a stopped process back its memory and lets it run: its checkpoint failed.
  auto let_stopped_go_on = [&](Error e) -> Error {
    if (external) {
      give_all_back();  // nothing is frozen yet
      return e;
    }
    if (!end_after_commit) return e;
    for (pid_t root : roots) continue_tree(root);  // CRIU stopped them (every tree of a job)
    if (give_all_back()) e.message += "; process " + std::to_string(req.pid) + " runs on";
    return e;
  };
  for (std::size_t i = 0; i < members.size(); ++i) {
    for (std::size_t j = 0; j < parked[i].size(); ++j) {
      const auto& r = parked[i][j].region;
      if (!held[i][j]) continue;  // a view stored elsewhere
      DrainRegion d{r, &*held[i][j], members[i].owner};
      if (must_store(i, r) && is_shared(i, r.address)) {
        std::vector<std::pair<std::size_t, std::uint64_t>> views{{i, r.address}};
        for (const auto& [view, stored] : view_of)
          if (stored == std::pair<std::size_t, std::uint64_t>{i, r.address}) views.push_back(view);
        shared_views_of.push_back(std::move(views));
        shared_to_store.push_back(std::move(d));
      } else if (must_store(i, r))
        to_store[i].push_back(std::move(d));
      else {
        writer->set_region_owner(members[i].owner);
        if (Status s = writer->add_region_from_parent(r.address, r.size, r.device); !s)
          return let_stopped_go_on(std::move(s).error());
      }
    }
  }
  std::uint64_t to_store_bytes = 0;
  for (const auto& list : to_store)
    for (const DrainRegion& d : list) to_store_bytes += d.region.size;
  for (const DrainRegion& d : shared_to_store) to_store_bytes += d.region.size;
  std::uint64_t stored_before = 0;
  auto last_progress = Clock::time_point{};
  auto stored = [&](std::uint64_t done) {
    auto now = Clock::now();
    done += stored_before;
    if (done < to_store_bytes && now - last_progress < std::chrono::milliseconds(100)) return;
    last_progress = now;
    progress(bytes_progress("storing", done, to_store_bytes));
  };
  auto tstore = Clock::now();
  // Note [Shared memory behind every view] (drain.h): under --leave-running the job runs again
  // before its shared allocations are read; each view is an entry of its member's table, held
  // `reading` until gcrd has read the allocation. Otherwise they are stored now.
  std::vector<SharedDrain> shared_drains;
  for (const DrainRegion& d : shared_to_store) shared_drains.push_back({d, {}});
  if (!req.leave_running && !shared_to_store.empty()) {
    auto drained = drain_regions(*gpu, *writer, shared_to_store, nullptr, nullptr, stored);
    if (!drained)
      return let_stopped_go_on(
          std::move(drained)
              .context("storing the shared device memory of job " + std::to_string(req.pid))
              .error());
    for (const DrainRegion& d : shared_to_store) stored_before += d.region.size;
  }
  std::vector<std::optional<control::Client>> running(members.size());
  std::vector<std::optional<CowTable>> tables(members.size());
  if (req.leave_running) {
    // The process gets its memory back before gcrd has read it: soft copy-on-write protects
    // what is still to be read (Note [Soft copy-on-write] in gcr/cow_table.h).
    auto tu = Clock::now();
    for (std::size_t i = 0; i < members.size(); ++i) {
      GCR_TRY_ASSIGN(control::Client again,
                     control::Client::connect(members[i].pid, std::chrono::seconds(10)));
      // Every view of a shared allocation gets the stored view's fd (Note [Shared regions]).
      std::vector<control::ParkedRegion> back;
      for (const auto& p : parked[i]) {
        int fd = p.fd.get();
        if (auto v = view_of.find({i, p.region.address}); v != view_of.end())
          fd = parked[v->second.first][parked_at[v->second]].fd.get();
        int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (copy < 0) return errno_error("duplicating a parked region's fd");
        back.push_back({p.region, UniqueFd(copy)});
      }
      GCR_TRY(again.unpark(back).context("giving process " + std::to_string(members[i].pid) +
                                         " its memory back"));
      std::vector<control::RegionRecord> records;
      for (const DrainRegion& d : to_store[i]) records.push_back(d.region);
      // Ibid.: this member's views of the shared allocations to store follow its own regions.
      std::vector<std::pair<std::size_t, std::uint32_t>> views;  // (allocation, entry)
      for (std::size_t k = 0; k < shared_to_store.size(); ++k)
        for (const auto& [m, address] : shared_views_of[k]) {
          auto at = parked_at.find({m, address});
          if (m != i || at == parked_at.end()) continue;  // not parked: nothing maps it there
          views.push_back({k, static_cast<std::uint32_t>(records.size())});
          records.push_back(parked[i][at->second].region);
        }
      if (!records.empty()) {
        auto t = CowTable::create(records, cow::kCopyOnWrite);
        if (t)
          for (const auto& [k, entry] : views) {
            t->entry(entry).state.store(cow::kReading, std::memory_order_release);
            shared_drains[k].views.push_back(&t->entry(entry));
          }
        Status begun = t ? again.cow_begin(t->fd(), t->count()) : Status(t.error());
        if (!begun) {
          (void)again.resume();  // running, but this checkpoint cannot be completed
          return std::move(begun).error();
        }
        tables[i].emplace(std::move(t).value());
      }
      running[i].emplace(std::move(again));
    }
    for (auto& r : running) GCR_TRY(r->resume());
    keepers_done();
    record_phase(rep, "unpark", tu);
  }
  record_phase(rep, "stall", t0);
  pause_point("draining");

  // Drain: regions, then CRIU's images, then the manifest.
  progress("storing " + std::to_string(rep.dirty_bytes >> 20) + " MiB of device memory" +
           (req.device_only ? std::string(" (no CRIU: a pre-copy round)")
            : external      ? std::string(" before the runtime's CRIU dumps the rest")
                            : " and the CRIU image"));
  Status drained_all = ok();
  if (req.leave_running && !shared_drains.empty()) {  // first: members may be waiting for them
    auto drained = drain_shared(*gpu, *writer, shared_drains, stored);
    if (drained) {
      for (const SharedDrain& d : shared_drains) stored_before += d.stored.region.size;
      rep.cow_waits += drained->wanted;
    } else {
      drained_all =
          std::move(drained)
              .context("storing the shared device memory of job " + std::to_string(req.pid))
              .error();
    }
  }
  for (std::size_t i = 0; i < members.size() && drained_all; ++i) {  // each behind its table
    auto drained = drain_regions(*gpu, *writer, to_store[i], tables[i] ? &*tables[i] : nullptr,
                                 running[i] ? &*running[i] : nullptr, stored);
    if (!drained) {
      drained_all =
          std::move(drained)
              .context("storing the device memory of process " + std::to_string(members[i].pid))
              .error();
      break;
    }
    for (const DrainRegion& d : to_store[i]) stored_before += d.region.size;
    rep.cow_copies += drained->took_copy;
    rep.cow_waits += drained->wanted;
  }
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (!running[i]) continue;
    if (i == 0)
      if (auto after_cut = running[i]->touch_order())
        touch_order.insert(touch_order.begin(), after_cut->begin(), after_cut->end());
    (void)running[i]->cow_end();
    (void)running[i]->close();
  }
  if (!drained_all) return let_stopped_go_on(std::move(drained_all).error());
  if (Status s = criu_finished(); !s) {
    tracking.reset();             // as above
    return std::move(s).error();  // it runs on (-R)
  }
  if (work) {  // --prev-images-dir's link: the dump stands alone
    std::error_code ignored;
    fs::remove(work->path() / "parent", ignored);
  }
  if (Status s = external ? ok() : store_criu_images(*writer, work->path()); !s)
    return let_stopped_go_on(std::move(s).error());
  HostPages pages;  // what CRIU's log says of --cow-dump, --cow-dma and --cow-track
  if ((dma_file || tracking) && work) pages = read_host_pages(work->path() / "dump.log");
  rep.host_pages_dma_frozen = pages.dma;
  rep.host_pages_saved = pages.saved;
  if (tracking) {
    // CRIU's images are the next dump's parent, whatever becomes of this checkpoint.
    rep.host_pages_from_parent = pages.from_parent;
    rep.host_pages_from_process = pages.from_process;
    rep.host_tracked_tasks = tracking->commit(std::move(*work));
    work.reset();
  }
  if (!touch_order.empty() && !job)
    writer->set_meta("touch_order", format_touch_order(touch_order));
  if (!views_meta.empty()) writer->set_meta("shared_views", views_meta);
  record_phase(rep, "store", tstore);
  record_phase(rep, "total", t_begin);
  for (const auto& [k, v] : rep.times_ns)
    writer->set_meta("timing." + k + "_ns", std::to_string(v));
  auto committed = writer->commit(req.tag);
  if (!committed) return let_stopped_go_on(std::move(committed).error());
  store::CommitInfo info = std::move(committed).value();
  if (external) {
    if (req.device_only)
      rep.kept_running = true;  // it has had its memory back since the unpark
    else
      GCR_TRY(
          finish_external_dump(req, store, info.id, rep, give_all_back, keepers_done, progress));
    if (rep.kept_running) lineage_record(*key, info.id.hex());
    rep.id = info.id.hex();
    rep.stats = info.stats;
    return rep;
  }
  // Note [gcrd owns lineage]: only now is this checkpoint a parent the next one may name.
  if (req.leave_running) lineage_record(*key, info.id.hex());
  if (end_after_commit && req.hold) {
    progress("checkpoint " + info.id.hex().substr(0, 12) + " committed; process " +
             std::to_string(req.pid) + " waits, stopped, for the migration to finish");
    bool handed = false;
    auto committed = [&] {
      handed = true;
      for (Keeper& k : keepers) k.handed_over();
    };
    bool end = req.hold(info.id.hex(), committed);
    if (!end && handed)
      for (Keeper& k : keepers) k.kept();
    if (!end)
      return let_stopped_go_on(Error{Errc::io_error, "the migration of process " +
                                                         std::to_string(req.pid) +
                                                         " did not finish (checkpoint " +
                                                         info.id.hex().substr(0, 12) + " stays)"});
  }
  if (end_after_commit) {
    // The checkpoint is safe: end the process, as `criu dump` without -R would have.
    // The whole tree CRIU dumped (and left stopped), workers too; every tree of a job.
    for (pid_t root : roots) criu::kill_tree(root);
    keepers_done();
  }
  rep.id = info.id.hex();
  rep.stats = info.stats;
  return rep;
}

}  // namespace gcr::gcrd
