// gcr checkpoint / restore / daemon. gcrd does the work (it holds the GPU and the parked memory);
// these commands find or start it, relay its progress, and print the summary.
#include "cmd_checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "cmd_process.h"
#include "command_trace.h"
#include "gcr/human_output.h"
#include "gcr/json.h"
#include "gcr/restore_streams.h"
#include "gcr/settings.h"
#include "gcr/stream_pull.h"
#include "gcr/unique_fd.h"
#include "gcrd_client.h"
#include "gcrd_protocol.h"
#include "paths.h"
#include "peer_keys.h"
#include "remote.h"

namespace gcr::cli {
namespace {

// CRIU counts host memory in pages.
const std::uint64_t kHostPage = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));

struct CheckpointOptions {
  std::vector<std::string> pid_args;  // as given: PID, or with --job PID@HOST:PORT
  std::vector<int> pids;
  std::string name;
  bool leave_running = false;
  bool stop_copy = false;
  bool tcp_close = false;
  bool json = false;
  std::string trace;          // --trace FILE
  double timeout_s = 10;      // --timeout: for the cut and the quiesce
  bool tree = false;          // --tree: PID's tree (always taken; the flag only says so)
  bool job = false;           // --job: the pids' trees are one job
  std::vector<int> job_pids;  // with --job: every pid after the first (sent as job_pids)
  // --job PID@HOST:PORT (Note [A job across hosts] in daemon/job_link.h): the other hosts' ranks,
  // by their gcrd's address, and the key they accept (--token-file).
  std::vector<std::pair<std::string, std::vector<int>>> remote;
  std::string token_file;
  double idle_s = 30;
  bool copy_parts = false;  // --copy-parts
  // Note [Checkpoints in peers' memory] (daemon/memory_tier.h) and [Checkpoints every period]
  // (daemon/periodic.h): a job's schedule.
  unsigned peer_copies = 0;         // --peer-copies
  std::string every;                // --every DURATION
  unsigned keep = 3;                // --keep
  std::vector<std::string> labels;  // --label KEY=VALUE
};

// PID, or PID@HOST:PORT (a rank on the host whose gcrd listens at HOST:PORT).
Status parse_pid_args(CheckpointOptions& o) {
  o.pids.clear();
  o.remote.clear();
  for (const std::string& a : o.pid_args) {
    auto at = a.find('@');
    std::string pid_text = a.substr(0, at);
    char* end = nullptr;
    long pid = std::strtol(pid_text.c_str(), &end, 10);
    // gcrd says what is wrong with a plain pid (no process 0, not yours); here only its form.
    if (pid_text.empty() || *end != '\0' || pid < 0 || pid > (1 << 22) ||
        (pid == 0 && at != std::string::npos))
      return Error{Errc::invalid_argument, "'" + a + "' is not a pid (nor PID@HOST:PORT)"};
    if (at == std::string::npos) {
      o.pids.push_back(static_cast<int>(pid));
      continue;
    }
    std::string where = a.substr(at + 1);
    if (where.find(':') == std::string::npos)
      return Error{
          Errc::invalid_argument,
          "'" + a + "': give the host's gcrd as HOST:PORT (what its gcr daemon --listen says)"};
    auto it = std::find_if(o.remote.begin(), o.remote.end(),
                           [&](const auto& r) { return r.first == where; });
    if (it == o.remote.end()) it = o.remote.insert(o.remote.end(), {where, {}});
    it->second.push_back(static_cast<int>(pid));
  }
  if (!o.remote.empty() && !o.job)
    return Error{Errc::invalid_argument,
                 "a process on another host (PID@HOST:PORT) is checkpointed as part of a job: "
                 "add --job"};
  if (!o.remote.empty() && o.pids.empty())
    return Error{Errc::invalid_argument,
                 "run gcr checkpoint --job on one of the job's hosts, naming at least one of its "
                 "processes there as a plain PID: that host's gcrd coordinates the others"};
  if (!o.remote.empty() && o.token_file.empty())
    return Error{Errc::invalid_argument,
                 "the job's other hosts need their token: --token-file FILE (the file their gcr "
                 "daemon --listen reads)"};
  return ok();
}

struct RestoreOptions {
  std::string name;
  int device = -1;
  std::string device_map;  // --device-map FROM=TO,...
  bool eager = false;
  bool new_pid_namespace = false;
  bool json = false;
  criu::StreamOptions streams;
  std::vector<std::string> accept_changed;
  std::string log;         // --log: where --detach sends stdout and stderr
  std::string token_file;  // a job across hosts: the key of its other hosts
  double idle_s = 30;
  std::vector<std::string> place;  // --place OLD=NEW
  std::string trace;               // --trace FILE
  bool latest = false;             // --latest: name is a schedule's NAME, restore its newest NAME.N
  // --clone (Note [A clone's network] in daemon/clone_network.h) and its network.
  bool clone = false;
  std::string netns, address, bridge, gateway, hostname;
};

using gcrd::field_u64;

std::string field(const std::map<std::string, std::string>& f, const std::string& k) {
  auto it = f.find(k);
  return it == f.end() ? "" : it->second;
}

// gcrd serves root and the user it runs as. Another user's gcrd (GCR_GCRD_SOCKET pointing at it)
// would refuse us, and ours cannot start there: say so rather than "gcrd failed to start".
Status check_socket_owner(const std::filesystem::path& socket) {
  if (geteuid() == 0) return ok();
  struct stat st {};
  if (::stat(socket.c_str(), &st) == 0) {
    if (st.st_uid == geteuid()) return ok();
    return Error{Errc::permission_denied,
                 "gcrd's socket " + socket.string() + " belongs to uid " +
                     std::to_string(st.st_uid) +
                     ", and gcrd serves only root and its own user; unset GCR_GCRD_SOCKET to use "
                     "(and start) your own"};
  }
  if (errno == EACCES)
    return Error{Errc::permission_denied,
                 "cannot reach gcrd's socket " + socket.string() +
                     " (permission denied: another user's); unset GCR_GCRD_SOCKET to use (and "
                     "start) your own"};
  return ok();
}

std::chrono::nanoseconds ns(std::uint64_t v) {
  return std::chrono::nanoseconds(v);
}

void add_transfer_fields(std::map<std::string, std::string>& f, const std::string& prefix,
                         const store::TransferReport& r) {
  f[prefix + "logical_bytes"] = std::to_string(r.logical_bytes);
  f[prefix + "copied_bytes"] = std::to_string(r.copied_bytes);
  f[prefix + "present_bytes"] = std::to_string(r.present_bytes);
  f[prefix + "chunks_copied"] = std::to_string(r.chunks_copied);
  f[prefix + "chunks_present"] = std::to_string(r.chunks_present);
  f[prefix + "packs"] = std::to_string(r.packs_written);
  f[prefix + "elapsed_ns"] = std::to_string(r.elapsed_ns);
}

// A checkpoint into a bucket: gcrd committed it in the bucket's cache store; upload it (its new
// chunks, then its manifest). A failed upload leaves it committed locally, and says how to retry.
void upload_checkpoints(const CheckpointOptions& o, Context& ctx, store::Backend& remote,
                        const store::StoreLocation& location, const std::string& cache_store,
                        std::vector<Result<std::map<std::string, std::string>>>& results) {
  std::optional<store::CheckpointId> last;
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (!results[i]) continue;
    auto& f = *results[i];
    std::string id = field(f, "id");
    std::optional<std::string> tag;
    if (!o.name.empty())
      tag = o.pids.size() == 1 ? o.name : o.name + "-" + std::to_string(o.pids[i]);
    auto pushed = push_from_cache(remote, id, tag, !o.json && ctx.stderr_tty);
    if (!pushed) {
      Error e = std::move(pushed).error();
      e.message = "checkpoint " + id.substr(0, 12) + " is committed in the local cache store " +
                  cache_store + " but not in " + location.text() + ": " + e.message;
      ctx.hint = "gcr --store " + cache_store + " image push " + id + " " + location.text() +
                 " uploads it again";
      results[i] = std::move(e);
      continue;
    }
    add_transfer_fields(f, "upload.", *pushed);
    f["store"] = location.text();
    last = pushed->id;
  }
  if (last) trim_cache(cache_store, *last);
}

// Checkpoints pid o.pids[i] through gcrd, relaying its progress (under `mu`: the pids are
// checkpointed concurrently).
Result<std::map<std::string, std::string>> checkpoint_pid(const CheckpointOptions& o, Context& ctx,
                                                          const std::string& store, std::size_t i,
                                                          std::mutex& mu) {
  auto conn = gcrd_connection();
  if (!conn) return std::move(conn).error();
  std::map<std::string, std::string> fields = {
      {"pid", std::to_string(o.pids[i])},
      {"leave_running", o.leave_running ? "1" : "0"},
      {"stop_copy", o.stop_copy ? "1" : "0"},
      {"tcp_close", o.tcp_close ? "1" : "0"},
      {"timeout_ms", std::to_string(static_cast<long long>(o.timeout_s * 1000))},
      {"store", store}};
  for (const std::string& l : o.labels) {  // checked when parsed: KEY=VALUE
    auto eq = l.find('=');
    fields["label." + l.substr(0, eq)] = l.substr(eq + 1);
  }
  if (!o.name.empty())
    fields["tag"] = o.pids.size() == 1 ? o.name : o.name + "-" + std::to_string(o.pids[i]);
  for (int p : o.job_pids)
    fields["job_pids"] += (fields["job_pids"].empty() ? "" : ",") + std::to_string(p);
  if (!o.remote.empty()) {  // Note [A job across hosts] (daemon/job_link.h)
    auto key = gcrd::read_client_key(o.token_file);
    if (!key) return std::move(key).error();
    fields["net_key_name"] = key->name;
    fields["net_key"] = key->secret;
    fields["idle_ms"] = std::to_string(static_cast<long long>(o.idle_s * 1000));
    if (o.copy_parts) fields["copy_parts"] = "1";
    if (o.peer_copies) fields["peer_copies"] = std::to_string(o.peer_copies);
    if (!o.every.empty()) {
      GCR_TRY_ASSIGN(std::chrono::milliseconds every, parse_period(o.every, "--every"));
      fields["every_ms"] = std::to_string(every.count());
      fields["every_keep"] = std::to_string(o.keep);
    }
    for (std::size_t k = 0; k < o.remote.size(); ++k) {
      fields["remote." + std::to_string(k)] = o.remote[k].first;
      std::string pids;
      for (int p : o.remote[k].second) pids += (pids.empty() ? "" : ",") + std::to_string(p);
      fields["remote_pids." + std::to_string(k)] = pids;
    }
  }
  // A bar for the storing with one pid only: several would draw over each other.
  ProgressLine bar(!o.json && ctx.stderr_tty && o.pids.size() == 1,
                   "pid " + std::to_string(o.pids[i]) + ": storing");
  return gcrd::call(conn->get(), "checkpoint", fields, [&](const std::string& line) {
    if (line.rfind("warning: ", 0) == 0) {  // what this checkpoint does the slow way: always said
      std::lock_guard lock(mu);
      std::fprintf(stderr, "gcr: pid %d: %s\n", o.pids[i], line.c_str());
      return;
    }
    if (o.json || !ctx.stderr_tty) return;
    std::lock_guard lock(mu);
    if (!draw_bytes_progress(bar, line))
      std::fprintf(stderr, "pid %d: %s\n", o.pids[i], line.c_str());
  });
}

// One thread per pid; results[i] and cuda[i] are pid o.pids[i]'s.
void checkpoint_pids(const CheckpointOptions& o, Context& ctx, const std::string& store,
                     std::vector<Result<std::map<std::string, std::string>>>& results,
                     std::vector<std::optional<bool>>& cuda) {
  std::mutex mu;
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < o.pids.size(); ++i) {
    threads.emplace_back([&, i] {
      cuda[i] = criu::maps_libcuda(o.pids[i]);  // before: without --leave-running it is gone after
      results[i] = checkpoint_pid(o, ctx, store, i, mu);
    });
  }
  for (auto& t : threads) t.join();
}

// Writes the --trace file; adds its fields to the (first) pid's result, and returns them.
Result<std::map<std::string, std::string>> finish_checkpoint_trace(
    const CheckpointOptions& o, CommandTrace& trace,
    Result<std::map<std::string, std::string>>& result) {
  auto written = trace.finish(o.trace, result ? &*result : nullptr);
  if (!written) {
    Error e = std::move(written).error();
    e.message = "--trace: " + e.message;
    return e;
  }
  std::map<std::string, std::string> trace_fields = std::move(written).value();
  if (result) result->insert(trace_fields.begin(), trace_fields.end());
  if (!o.json)
    for (const auto& [k, v] : trace_fields)
      if (k.rfind("trace.note.", 0) == 0) std::fprintf(stderr, "gcr: --trace: %s\n", v.c_str());
  return trace_fields;
}

void print_checkpoints_json(const CheckpointOptions& o,
                            const std::vector<Result<std::map<std::string, std::string>>>& results,
                            const std::vector<std::optional<bool>>& cuda) {
  JsonWriter j;
  j.begin_array();
  for (std::size_t i = 0; i < o.pids.size(); ++i) {
    j.begin_object();
    if (results[i]) {
      json_fields(j, *results[i]);
      if (cuda[i]) j.field("uses_cuda", *cuda[i]);
    } else {
      j.field("pid", static_cast<std::int64_t>(o.pids[i]))
          .field("error", results[i].error().message);
    }
    j.end_object();
  }
  j.end_array();
  print(j.take());
}

// The summary's first line: which checkpoint of which pids, and how long it took.
std::string describe_checkpoint_headline(const CheckpointOptions& o,
                                         const std::map<std::string, std::string>& f) {
  std::string pids = field(f, "pid");
  std::vector<std::string> others;
  for (int p : o.job_pids) others.push_back(std::to_string(p));
  for (const auto& [where, ps] : o.remote)
    for (int p : ps) others.push_back(std::to_string(p) + "@" + where);
  for (std::size_t k = 0; k < others.size(); ++k)
    pids += (k + 1 == others.size() ? " and " : ", ") + others[k];
  std::string job = others.empty()     ? ""
                    : o.remote.empty() ? ", one job"
                                       : ", one job across " + field(f, "job_hosts") + " hosts";
  std::string copies;  // Note [Checkpoints in peers' memory] (daemon/memory_tier.h)
  if (field_u64(f, "peer_copies_wanted"))
    copies = "  copied into peers' memory: " + field(f, "peer_copies") + " of " +
             field(f, "peer_copies_wanted") + " copies, " +
             format_duration(ns(field_u64(f, "time.peer_copies_ns"))) + "\n";
  return "checkpoint " + field(f, "id").substr(0, 12) + " of pid" + (others.empty() ? " " : "s ") +
         pids + " (" + field(f, "kind") + job + "): stall " +
         format_duration(ns(field_u64(f, "time.stall_ns"))) + ", total " +
         format_duration(ns(field_u64(f, "time.total_ns"))) + "\n" + copies;
}

// What was taken of the device (or why nothing was: a --stop-copy baseline).
std::string describe_checkpoint_device(const CheckpointOptions& o,
                                       const std::map<std::string, std::string>& f,
                                       std::optional<bool> cuda) {
  bool baseline = field(f, "kind") == "stop-copy" && !o.stop_copy;
  if (baseline && cuda == false)
    return "  pid " + field(f, "pid") +
           " does not use CUDA: CRIU alone checkpointed it (no GPU state to save)\n";
  if (baseline)
    return "  pid " + field(f, "pid") +
           " is not running under gcr: checkpointed the --stop-copy way (the driver copied "
           "its device memory into CRIU's image)\n";
  return "  device memory " + format_bytes(field_u64(f, "region_bytes")) + " in " +
         field(f, "regions") + " regions" +
         (field_u64(f, "processes") > 1
              ? " of " + field(f, "processes") + " processes (" + field(f, "shared_regions") +
                    " shared between them, stored once)"
              : std::string()) +
         ", " + format_bytes(field_u64(f, "dirty_bytes")) + " changed since the last checkpoint\n";
}

// What was stored and uploaded, the host memory taken, and the copies made while storing.
std::string describe_checkpoint_storage(const std::map<std::string, std::string>& f) {
  std::string line =
      "  stored " + format_bytes(field_u64(f, "stat.new_bytes")) + " new of " +
      format_bytes(field_u64(f, "stat.logical_bytes")) + " (zero " +
      format_bytes(field_u64(f, "stat.zero_bytes")) + ", deduplicated " +
      format_bytes(field_u64(f, "stat.dup_self_bytes") + field_u64(f, "stat.dup_parent_bytes") +
                   field_u64(f, "stat.dup_other_bytes")) +
      ")\n";
  if (f.count("upload.logical_bytes"))
    line += "  uploaded " + format_bytes(field_u64(f, "upload.copied_bytes")) + " to " +
            field(f, "store") + " (" + format_bytes(field_u64(f, "upload.present_bytes")) +
            " of its chunks were there already) in " +
            format_duration(ns(field_u64(f, "upload.elapsed_ns"))) + "\n";
  if (field_u64(f, "host_pages_from_parent"))
    line += "  host memory: " + format_bytes(field_u64(f, "host_pages_from_process") * kHostPage) +
            " taken from the process" +
            (field_u64(f, "host_pages_pinned")
                 ? " (" + format_bytes(field_u64(f, "host_pages_pinned") * kHostPage) +
                       " of it pinned for DMA, taken every time)"
                 : "") +
            ", " + format_bytes(field_u64(f, "host_pages_from_parent") * kHostPage) +
            " unchanged since the last checkpoint\n";
  if (field_u64(f, "cow_copies") || field_u64(f, "cow_waits"))
    line += "  while it was stored, the process copied " + field(f, "cow_copies") +
            " regions before writing them and waited for " + field(f, "cow_waits") + "\n";
  return line;
}

// The summary of each checkpoint taken, and its warnings.
void print_checkpoint_summaries(
    const CheckpointOptions& o,
    const std::vector<Result<std::map<std::string, std::string>>>& results,
    const std::vector<std::optional<bool>>& cuda) {
  for (std::size_t i = 0; i < o.pids.size(); ++i) {
    if (!results[i]) continue;
    const auto& f = *results[i];
    std::string text = describe_checkpoint_headline(o, f);
    text += describe_checkpoint_device(o, f, cuda[i]);
    text += describe_checkpoint_storage(f);
    text += describe_trace(f);
    print(text);
    for (const auto& [k, v] : f)
      if (k.rfind("warning", 0) == 0) std::fprintf(stderr, "gcr: warning: %s\n", v.c_str());
  }
}

// The first pid's error, naming the pid; ok when every checkpoint was taken.
Status first_checkpoint_error(
    const CheckpointOptions& o,
    const std::vector<Result<std::map<std::string, std::string>>>& results) {
  Error first_error{Errc::ok, {}};
  for (std::size_t i = 0; i < o.pids.size(); ++i)
    if (!results[i] && first_error.code == Errc::ok) {
      first_error = results[i].error();
      first_error.message =
          "checkpoint of pid " + std::to_string(o.pids[i]) + ": " + first_error.message;
    }
  if (first_error.code != Errc::ok) return first_error;
  return ok();
}

// Note [Checkpoints every period] (daemon/periodic.h): the job's schedule, kept by this host's
// gcrd.
Status schedule_job(const CheckpointOptions& o, Context& ctx) {
  GCR_TRY_ASSIGN(store::StoreLocation location, ctx.store_location());
  if (location.is_s3())
    return Error{Errc::unsupported, "--every checkpoints into a local store; --store is a bucket"};
  std::vector<Result<std::map<std::string, std::string>>> results(1, Error{Errc::internal, ""});
  std::vector<std::optional<bool>> cuda(1);
  checkpoint_pids(o, ctx, location.directory.string(), results, cuda);
  if (!results[0]) return std::move(results[0]).context("--every").error();
  auto& f = *results[0];
  if (o.json) {
    JsonWriter j;
    j.begin_object()
        .field("pid", static_cast<std::int64_t>(o.pids[0]))
        .field("every_ms", gcrd::field_u64(f, "every_ms"))
        .field("keep", gcrd::field_u64(f, "every_keep"))
        .field("name", f["every_name"])
        .field("job_hosts", gcrd::field_u64(f, "job_hosts"))
        .field("peer_copies", static_cast<std::uint64_t>(o.peer_copies))
        .end_object();
    print(j.take());
    return ok();
  }
  std::printf(
      "checkpointing the job of %s hosts every %s as %s.N (the newest also %s), keeping "
      "%s%s; gcr ps shows it\n",
      f["job_hosts"].c_str(),
      format_duration(std::chrono::milliseconds(gcrd::field_u64(f, "every_ms"))).c_str(),
      f["every_name"].c_str(), f["every_name"].c_str(), f["every_keep"].c_str(),
      o.peer_copies ? (", each part copied into the memory of " + std::to_string(o.peer_copies) +
                       " other host" + (o.peer_copies > 1 ? "s" : ""))
                          .c_str()
                    : "");
  return ok();
}

Status checkpoint(const CheckpointOptions& given, Context& ctx) {
  CheckpointOptions o = given;
  if (o.pids.empty() && !o.pid_args.empty()) GCR_TRY(parse_pid_args(o));
  if (o.pids.empty())
    return Error{Errc::invalid_argument, "no pid given: gcr checkpoint PID [PID...]"};
  if (o.job) {  // Note [A job of several trees] (daemon/job.h): one checkpoint of them all
    if (o.pids.size() + o.remote.size() < 2)
      return Error{Errc::invalid_argument,
                   "--job checkpoints several process trees as one job: give the pid of each "
                   "(a job under one launcher is the launcher's tree: give its pid alone)"};
    if ((o.peer_copies || !o.every.empty()) && o.remote.empty())
      return Error{Errc::invalid_argument,
                   std::string(o.every.empty() ? "--peer-copies" : "--every") +
                       " is for a job across hosts (--job with PID@HOST:PORT); a process is "
                       "checkpointed every period by gcr run --checkpoint-every"};
    CheckpointOptions one = o;
    one.job = false;
    one.pids = {o.pids[0]};
    one.job_pids.assign(o.pids.begin() + 1, o.pids.end());
    return checkpoint(one, ctx);
  }
  if (o.peer_copies || !o.every.empty()) {
    if (o.remote.empty())
      return Error{Errc::invalid_argument,
                   "--every and --peer-copies are for a job across hosts: --job PID "
                   "PID@HOST:PORT ..."};
    if (!o.every.empty()) return schedule_job(o, ctx);
  }
  if (!o.trace.empty() && o.pids.size() != 1)
    return Error{Errc::invalid_argument,
                 "--trace records one process: give one pid (or one --trace per checkpoint)"};
  GCR_TRY_ASSIGN(store::StoreLocation location, ctx.store_location());
  std::string store = location.directory.string();
  std::unique_ptr<store::Backend> remote;
  if (location.is_s3()) {
    // Before any process is touched: bad credentials, a missing bucket, an endpoint that is down
    // or a bucket without conditional writes fail here.
    GCR_TRY_ASSIGN(remote, open_location(location, /*create=*/true));
    store = cache_store_of(*remote).string();
  }
  std::vector<Result<std::map<std::string, std::string>>> results(o.pids.size(),
                                                                  Error{Errc::internal, "not run"});
  std::vector<std::optional<bool>> cuda(o.pids.size());
  std::optional<CommandTrace> trace;
  if (!o.trace.empty()) trace = CommandTrace::begin(o.pids[0]);
  checkpoint_pids(o, ctx, store, results, cuda);
  std::map<std::string, std::string> trace_fields;
  if (trace) {
    GCR_TRY_ASSIGN(trace_fields, finish_checkpoint_trace(o, *trace, results[0]));
  }
  if (remote) upload_checkpoints(o, ctx, *remote, location, store, results);
  if (o.json)
    print_checkpoints_json(o, results, cuda);
  else
    print_checkpoint_summaries(o, results, cuda);
  if (trace && !results[0] && !o.json) std::fputs(describe_trace(trace_fields).c_str(), stderr);
  return first_checkpoint_error(o, results);
}

// The files the restored process gets for its streams and logs (restore_streams.h), opened here
// with the caller's rights, from the checkpoint's record of what it had open.
// arriving: o.name is the id of a checkpoint still arriving from a bucket (gcr/stream_pull.h).
Result<criu::StreamPlan> plan_restore_streams(RestoreOptions o, Context& ctx, bool arriving) {
  GCR_TRY_ASSIGN(auto store, ctx.open_store());
  store::CheckpointId id;
  if (arriving) {
    id = *store::Id128::from_hex(o.name);
  } else {
    GCR_TRY_ASSIGN(id, store->resolve(o.name));
  }
  GCR_TRY_ASSIGN(auto reader, store->open_checkpoint(id, arriving));
  const auto& m = reader->manifest();
  // gcrd decides (restore.cpp); saying it here first keeps the refusal about whose checkpoint
  // this is rather than about a file of theirs this user cannot open.
  const std::string owner = m.meta_or("owner_uid");
  if (geteuid() != 0 && owner != std::to_string(geteuid()))
    return Error{Errc::permission_denied,
                 "checkpoint " + id.hex().substr(0, 12) + " belongs to " +
                     (owner.empty() ? std::string("no recorded owner (an older gcr wrote it)")
                                    : "uid " + owner) +
                     "; only root or its owner may restore it"};
  for (const std::string& a : o.accept_changed) {
    std::error_code ec;
    o.streams.accept_changed.insert(std::filesystem::absolute(a, ec).lexically_normal().string());
  }
  if (o.streams.detach)
    o.streams.detach_log = o.log.empty() ? "gcr-" + id.hex().substr(0, 12) + ".log" : o.log;
  return criu::plan_streams(m.meta, o.streams);
}

// A restore from a bucket: where the checkpoint is, and what fetching it into the bucket's cache
// store keeps until the restore is done.
struct RestoreFetch {
  std::optional<store::LocatedName> located;
  std::unique_ptr<store::Backend> remote;
  std::unique_ptr<store::StreamedPull> streamed;  // after remote: it uses it until destroyed
  std::optional<store::TransferReport> pulled;

  bool arriving() const { return streamed && streamed->arriving(); }
  Error error(Error e) const {
    e.message = "fetching " + located->name + " from " + located->store.text() + ": " + e.message;
    return e;
  }
};

// The bucket and name of the checkpoint `name` names there: an s3:// URL, or any name with a
// bucket as the store. nullopt for a local store.
Result<std::optional<store::LocatedName>> locate_in_bucket(const std::string& name, Context& ctx) {
  std::optional<store::LocatedName> located = store::split_store_url_and_name(name);
  if (!located) {
    GCR_TRY_ASSIGN(store::StoreLocation location, ctx.store_location());
    if (location.is_s3()) located = store::LocatedName{location, name};
  }
  return located;
}

// Brings a checkpoint located in a bucket into the bucket's cache store (streamed: its CRIU files
// only, the rest goes on arriving), and points o.name and the store at it there.
Status fetch_into_cache(RestoreOptions& o, Context& ctx, RestoreFetch& fetch) {
  if (!fetch.located) return ok();
  const store::LocatedName& located = *fetch.located;
  GCR_TRY_ASSIGN(fetch.remote, open_location(located.store, /*create=*/false));
  bool stream = !o.eager && settings().stream_restore;  // GCR_STREAM_RESTORE=0: as --eager
  if (stream) {
    auto id = store::resolve_checkpoint(*fetch.remote, located.name);
    if (!id) return fetch.error(std::move(id).error());
    auto started = store::StreamedPull::start(*fetch.remote, *id);
    if (!started) return fetch.error(std::move(started).error());
    fetch.streamed = std::move(started).value();
    if (Status s = fetch.streamed->files_ready(); !s) return fetch.error(std::move(s).error());
    o.name = id->hex();
  } else {
    auto r = pull_into_cache(*fetch.remote, located.name, !o.json && ctx.stderr_tty);
    if (!r) return fetch.error(std::move(r).error());
    if (!o.json)
      std::fputs(store::describe_transfer(*r, "fetched", "from " + located.store.text()).c_str(),
                 stderr);
    o.name = r->id.hex();
    fetch.pulled = std::move(r).value();
  }
  ctx.store_option = cache_store_of(*fetch.remote).string();
  return ok();
}

// After the restore: the rest of a streamed pull, and the cache kept within its size.
Status finish_fetch(const RestoreOptions& o, Context& ctx, RestoreFetch& fetch) {
  if (!fetch.located) return ok();
  if (fetch.streamed) {
    auto r = fetch.streamed->finish();
    if (!r) return fetch.error(std::move(r).error());
    if (!o.json)
      std::fputs(
          store::describe_transfer(*r, "fetched", "from " + fetch.located->store.text()).c_str(),
          stderr);
    fetch.pulled = std::move(r).value();
  }
  trim_cache(ctx.store_option, fetch.pulled->id);
  return ok();
}

// What gcrd is asked to restore, and the files it hands the restored process.
struct RestoreRequest {
  std::map<std::string, std::string> fields;
  std::vector<int> files;      // streams.inherit's fds, in order
  bool shares_stdout = false;  // the process gets this command's own stdout
};

RestoreRequest restore_request(const RestoreOptions& o, Context& ctx,
                               const criu::StreamPlan& streams, bool arriving) {
  RestoreRequest req;
  req.fields = {{"name", o.name}, {"store", ctx.store_root().string()}};
  if (o.device >= 0) req.fields["device"] = std::to_string(o.device);
  if (!o.device_map.empty()) req.fields["device_map"] = o.device_map;
  if (o.eager) req.fields["eager"] = "1";
  if (arriving) req.fields["arriving"] = "1";
  if (o.new_pid_namespace) req.fields["new_pid_namespace"] = "1";
  if (o.clone) {
    req.fields["clone"] = "1";
    for (const auto& [k, v] : {std::pair{"clone_netns", &o.netns},
                               {"clone_address", &o.address},
                               {"clone_bridge", &o.bridge},
                               {"clone_gateway", &o.gateway},
                               {"clone_hostname", &o.hostname}})
      if (!v->empty()) req.fields[k] = *v;
  }
  if (!o.token_file.empty()) {  // Note [A job across hosts] (daemon/job_link.h)
    if (auto key = gcrd::read_client_key(o.token_file)) {  // checked by restore() first
      req.fields["net_key_name"] = key->name;
      req.fields["net_key"] = key->secret;
    }
    req.fields["idle_ms"] = std::to_string(static_cast<long long>(o.idle_s * 1000));
    for (std::size_t i = 0; i < o.place.size(); ++i)
      req.fields["place." + std::to_string(i)] = o.place[i];
  }
  for (std::size_t i = 0; i < streams.inherit.size(); ++i) {
    req.fields["inherit." + std::to_string(i)] = streams.inherit[i].key;
    req.files.push_back(streams.inherit[i].fd.get());
    if (streams.inherit[i].callers_own && streams.inherit[i].stream == 1) req.shares_stdout = true;
  }
  return req;
}

// --trace: gcrd, and what it starts (CRIU, the restored tasks), from here on.
Result<std::optional<CommandTrace>> begin_restore_trace(const RestoreOptions& o) {
  if (o.trace.empty()) return std::optional<CommandTrace>();
  // gcrd's pid from gcrd (the socket's peer is whoever created it: before --detach forked).
  GCR_TRY_ASSIGN(UniqueFd ping, gcrd_connection());
  GCR_TRY_ASSIGN(auto pong, gcrd::call(ping.get(), "ping", {}, [](const std::string&) {}));
  return std::optional<CommandTrace>(
      CommandTrace::begin(static_cast<pid_t>(field_u64(pong, "pid"))));
}

// Asks gcrd on `conn` for the restore, drawing its progress.
Result<std::map<std::string, std::string>> call_restore(const RestoreOptions& o, Context& ctx,
                                                        int conn, const RestoreRequest& req) {
  ProgressLine bar(!o.json && ctx.stderr_tty, "loading device memory");
  auto called = gcrd::call(
      conn, "restore", req.fields,
      [&](const std::string& line) {
        if (o.json || !ctx.stderr_tty) return;
        if (!draw_bytes_progress(bar, line)) std::fprintf(stderr, "%s\n", line.c_str());
      },
      req.files);
  bar.clear();
  return called;
}

// Writes the --trace file; adds its fields to gcrd's answer, or says them when the restore failed.
Status finish_restore_trace(const RestoreOptions& o, CommandTrace& trace,
                            Result<std::map<std::string, std::string>>& called) {
  pid_t restored = called ? static_cast<pid_t>(field_u64(*called, "pid")) : 0;
  auto written = trace.finish(o.trace, called ? &*called : nullptr, restored);
  if (!written) {
    Error e = std::move(written).error();
    e.message = "--trace: " + e.message;
    return e;
  }
  if (!o.json || !called)
    for (const auto& [k, v] : *written)
      if (k.rfind("trace.note.", 0) == 0) std::fprintf(stderr, "gcr: --trace: %s\n", v.c_str());
  if (called)
    called->insert(written->begin(), written->end());
  else if (!o.json)
    std::fputs(describe_trace(*written).c_str(), stderr);
  return ok();
}

// From this command's start (a fetch from a bucket included), on gcrd's clock (CLOCK_MONOTONIC).
void add_command_times(std::map<std::string, std::string>& f,
                       std::chrono::steady_clock::time_point command_start) {
  const auto t0 = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(command_start.time_since_epoch())
          .count());
  for (const char* phase : {"resume", "full"}) {
    std::uint64_t start = field_u64(f, std::string("start.") + phase + "_ns");
    std::uint64_t length = field_u64(f, std::string("time.") + phase + "_ns");
    if (start != 0 && start + length > t0)
      f[std::string("time.command_") + phase + "_ns"] = std::to_string(start + length - t0);
  }
}

void add_fetch_fields(std::map<std::string, std::string>& f, const RestoreFetch& fetch) {
  if (!fetch.pulled) return;
  add_transfer_fields(f, "fetch.", *fetch.pulled);
  f["fetch.from"] = fetch.located->store.text();
  f["fetch.streamed"] = fetch.arriving() ? "1" : "0";
}

void print_restore_json(const std::map<std::string, std::string>& f,
                        const criu::StreamPlan& streams, bool shares_stdout) {
  JsonWriter j;
  j.begin_object();
  json_fields(j, f);
  j.key("streams").begin_array();
  for (const auto& in : streams.inherit) j.value(in.what);
  j.end_array();
  j.end_object();
  // The process writes to our stdout already: the JSON goes to stderr, whole, out of its way.
  if (shares_stdout)
    std::fprintf(stderr, "%s", j.take().c_str());
  else
    print(j.take());
}

void print_restore_summary(const RestoreOptions& o, const std::map<std::string, std::string>& f,
                           bool shares_stdout) {
  std::string where = field(f, "new_pid_namespace") == "1"
                          ? " (pid " + field(f, "original_pid") + " in a new PID namespace)"
                          : "";
  if (field(f, "clone") == "1")  // Note [A clone's network] (daemon/clone_network.h)
    where +=
        ", a clone in a network namespace of its own (" + field(f, "clone_network") +
        "; nsenter -t " + field(f, "pid") + " -n enters it)" +
        (field(f, "clone_hostname").empty() ? "" : ", host name " + field(f, "clone_hostname"));
  if (!field(f, "job_pids").empty())  // Note [A job of several trees] (daemon/job.h)
    where += " with the job's other trees as pids " + field(f, "job_pids");
  for (int i = 0; !field(f, "remote." + std::to_string(i)).empty(); ++i)
    where += (i ? ", " : "; on host ") + field(f, "remote." + std::to_string(i)) + " as pids " +
             field(f, "remote_pids." + std::to_string(i)) +
             (field(f, "remote_from." + std::to_string(i)).empty()
                  ? std::string()
                  : " (its part read from " + field(f, "remote_from." + std::to_string(i)) + ")");
  // The process writes to our stdout now: the summary goes to stderr, out of its way.
  auto say = [shares_stdout](const std::string& text) {
    if (shares_stdout)
      std::fputs(text.c_str(), stderr);
    else
      print(text);
  };
  say("restored checkpoint " + field(f, "id").substr(0, 12) + " (" + field(f, "kind") +
      (field(f, "restored_on").empty()
           ? std::string()
           : ") on host " + field(f, "restored_on") +
                 " (the job's coordinator there: its part read from this host's memory") +
      ") as pid " + field(f, "pid") + where + ": running after " +
      format_duration(ns(field_u64(f, "time.resume_ns"))) + ", all memory after " +
      format_duration(ns(field_u64(f, "time.full_ns"))) +
      (field(f, "host_memory") == "lazy"
           ? " (host memory loaded lazily" +
                 (field(f, "host_source") == "store" ? std::string(" from the store") : "") +
                 ", in " + format_duration(ns(field_u64(f, "time.host_ns"))) + " from CRIU's start)"
           : "") +
      "\n  device memory " + format_bytes(field_u64(f, "region_bytes")) + " loaded " +
      (field(f, "mode") == "eager" ? "before the process ran" : "on demand") + " in " +
      format_duration(ns(field_u64(f, "time.load_ns"))) + " (" + field(f, "wanted_regions") +
      " regions waited for), CRIU restore " + format_duration(ns(field_u64(f, "time.criu_ns"))) +
      "\n" + describe_trace(f));
  if (o.streams.detach)  // as plan_restore_streams named it
    say("  its output goes to " +
        (o.log.empty() ? "gcr-" + field(f, "id").substr(0, 12) + ".log" : o.log) + "\n");
}

// --latest NAME (Note [Checkpoints every period] in daemon/periodic.h): the schedule's newest
// checkpoint complete in some tier, as gcrd finds it (verb latest: each part of a job's checkpoint
// on its host, in a peer's memory or in this store, with the job's key).
Result<std::string> latest_of(const RestoreOptions& o, Context& ctx) {
  GCR_TRY_ASSIGN(store::StoreLocation location, ctx.store_location());
  if (location.is_s3())
    return Error{Errc::unsupported, "--latest looks in a local store; --store is a bucket"};
  std::map<std::string, std::string> fields{{"name", o.name},
                                            {"store", location.directory.string()}};
  if (!o.token_file.empty()) {
    GCR_TRY_ASSIGN(auto key, gcrd::read_client_key(o.token_file));
    fields["net_key_name"] = key.name;
    fields["net_key"] = key.secret;
  }
  GCR_TRY_ASSIGN(UniqueFd conn, gcrd_connection());
  GCR_TRY_ASSIGN(auto f, gcrd::call(conn.get(), "latest", fields, nullptr).context("--latest"));
  if (!o.json)
    for (const auto& [k, v] : f)
      if (k.starts_with("skipped.")) std::fprintf(stderr, "gcr: skipped %s\n", v.c_str());
  return field(f, "name");
}

Status restore(RestoreOptions o, Context& ctx) {
  if (o.latest) {
    GCR_TRY_ASSIGN(o.name, latest_of(o, ctx));
    if (!o.json) std::fprintf(stderr, "gcr: the newest checkpoint is %s\n", o.name.c_str());
  }
  if (!o.token_file.empty()) GCR_TRY(gcrd::read_client_key(o.token_file).context("--token-file"));
  if (!o.place.empty() && o.token_file.empty())
    return Error{Errc::invalid_argument,
                 "--place restores a part of a job across hosts: give "
                 "their token with --token-file FILE"};
  const auto command_start = std::chrono::steady_clock::now();
  if (!o.log.empty() && !o.streams.detach)
    return Error{Errc::invalid_argument, "--log goes with --detach"};
  // From a bucket: the checkpoint is brought into the bucket's cache store (what is not there
  // yet) and restored from there as from any local store; without --eager, streamed
  // (gcr/stream_pull.h): the restore starts once the CRIU files are in, while the regions arrive.
  RestoreFetch fetch;
  GCR_TRY_ASSIGN(fetch.located, locate_in_bucket(o.name, ctx));
  GCR_TRY(fetch_into_cache(o, ctx, fetch));
  GCR_TRY_ASSIGN(criu::StreamPlan streams, plan_restore_streams(o, ctx, fetch.arriving()));
  GCR_TRY_ASSIGN(UniqueFd conn, gcrd_connection());
  RestoreRequest req = restore_request(o, ctx, streams, fetch.arriving());
  for (const auto& w : streams.warnings) std::fprintf(stderr, "gcr: warning: %s\n", w.c_str());
  GCR_TRY_ASSIGN(std::optional<CommandTrace> trace, begin_restore_trace(o));
  auto called = call_restore(o, ctx, conn.get(), req);
  if (trace) GCR_TRY(finish_restore_trace(o, *trace, called));
  if (!called && fetch.streamed) fetch.streamed->cancel();  // no one waits for the rest
  Status fetched = finish_fetch(o, ctx, fetch);
  if (!called) return std::move(called).error();
  if (!fetched) return fetched;
  auto f = std::move(called).value();
  add_command_times(f, command_start);
  add_fetch_fields(f, fetch);
  if (o.json)
    print_restore_json(f, streams, req.shares_stdout);
  else
    print_restore_summary(o, f, req.shares_stdout);
  return ok();
}

struct DaemonOptions {
  std::string listen, token_file, containers, runtime, allow_uids;
  std::string peer_memory, peer_memory_dir, peer_copy_rate;  // Note [Checkpoints in peers' memory]
};

Status daemon(const DaemonOptions& o, Context& ctx) {
  GCR_TRY_ASSIGN(auto driver, real_driver_path());
  GCR_TRY_ASSIGN(auto gcrd, gcrd_path());
  for (const auto& [k, v] : gcrd_environment(driver)) setenv(k.c_str(), v.c_str(), 1);
  std::string sock = gcrd::default_socket_path().string();
  std::string bin = gcrd.string();
  std::vector<std::string> args = {bin, "--socket", sock};
  if (!o.listen.empty()) {
    if (o.token_file.empty())
      return Error{Errc::invalid_argument,
                   "--listen needs --token-file FILE: the token other hosts must present "
                   "(docs/security.md)"};
    GCR_TRY_ASSIGN(store::StoreLocation location, ctx.store_location());
    if (location.is_s3())
      return Error{Errc::unsupported, "--listen serves a local store; --store is a bucket"};
    // Other hosts get a store of their own, never this user's checkpoints (docs/security.md,
    // "Network"): the one named with --store or GCR_STORE, else the default store's sibling
    // "served" (created 0700 on first use).
    const bool named = !ctx.store_option.empty() || (ctx.env_store && !ctx.env_store->empty());
    const std::filesystem::path served =
        named ? location.directory : store::Store::default_root().parent_path() / "served";
    args.insert(args.end(),
                {"--listen", o.listen, "--token-file", o.token_file, "--store", served.string()});
    if (!o.allow_uids.empty()) args.insert(args.end(), {"--allow-uids", o.allow_uids});
  } else if (!o.allow_uids.empty()) {
    return Error{Errc::invalid_argument,
                 "--allow-uids says whom other hosts' processes may run as: it needs --listen"};
  }
  if (!o.peer_memory.empty()) {
    if (o.listen.empty())
      return Error{Errc::invalid_argument,
                   "--peer-memory keeps other hosts' checkpoints: it needs --listen"};
    GCR_TRY(parse_size(o.peer_memory).context("--peer-memory"));
    args.insert(args.end(), {"--peer-memory", o.peer_memory});
    if (!o.peer_memory_dir.empty())
      args.insert(args.end(),
                  {"--peer-memory-dir", std::filesystem::absolute(o.peer_memory_dir).string()});
    if (!o.peer_copy_rate.empty())
      args.insert(args.end(), {"--peer-copy-mib-per-s", o.peer_copy_rate});
  } else if (!o.peer_memory_dir.empty() || !o.peer_copy_rate.empty()) {
    return Error{Errc::invalid_argument,
                 "--peer-memory-dir and --peer-copy-mib-per-s go with --peer-memory"};
  }
  if (!o.containers.empty()) {
    if (o.listen.empty())
      return Error{Errc::invalid_argument,
                   "--containers is for containers migrated from other hosts: it needs --listen"};
    args.insert(args.end(), {"--containers", std::filesystem::absolute(o.containers).string()});
    if (!o.runtime.empty()) args.insert(args.end(), {"--runtime", o.runtime});
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv(bin.c_str(), argv.data());
  return errno_error("cannot run " + bin);
}

}  // namespace

bool draw_bytes_progress(ProgressLine& bar, const std::string& line) {
  if (auto p = gcrd::parse_bytes_progress(line)) {
    bar.update(p->done, p->total);
    return true;
  }
  bar.clear();
  return false;
}

Result<UniqueFd> gcrd_connection() {
  GCR_TRY_ASSIGN(auto driver, real_driver_path());
  GCR_TRY_ASSIGN(auto gcrd, gcrd_path());
  auto socket = gcrd::default_socket_path();
  GCR_TRY(check_socket_owner(socket));
  if (!settings().start_gcrd) {  // the host's gcrd is a service: never one of our own beside it
    auto running = gcrd::connect_running(socket);
    if (!running)
      return Error{running.error().code,
                   running.error().message +
                       "; GCR_START_GCRD=0: gcr starts no gcrd of its own, start this host's "
                       "gcrd (its service, or 'gcr daemon')"};
    return UniqueFd(*running);
  }
  GCR_TRY_ASSIGN(int fd, gcrd::connect_or_start(socket, gcrd, gcrd_environment(driver)));
  return UniqueFd(fd);
}

// A declaration table (CLI11 options): exempt from the 80-line limit (issue 33).
void register_checkpoint_commands(CLI::App& app, Context& ctx) {
  static CheckpointOptions co;
  auto* c = app.add_subcommand("checkpoint", "Checkpoint running processes into the image store");
  c->add_option("pid", co.pid_args,
                "Processes to checkpoint (concurrently); with --job, PID@HOST:PORT for a process "
                "on another host (its gcrd's --listen address)")
      ->required();
  c->add_option("--name", co.name, "Tag the checkpoint (NAME-PID with several pids)")
      ->type_name("NAME");
  c->add_flag("--leave-running,-R", co.leave_running,
              "Keep the process running after the checkpoint");
  c->add_flag("--stop-copy", co.stop_copy,
              "The baseline: the driver copies device memory through host RAM into CRIU's image "
              "(cuda-checkpoint + CRIU)");
  c->add_flag(
      "--tcp-close", co.tcp_close,
      "Checkpoint every established TCP connection as closed (the restored process finds "
      "it closed): without it, one whose two ends the checkpoint takes is carried, bytes in "
      "flight included, and one to anything else is refused");
  c->add_option("--trace", co.trace,
                "Record the checkpoint as the kernel saw it (eBPF: every thread's scheduling and "
                "its waits at gcr's gate) beside gcrd's phases, into FILE (Chrome/Perfetto JSON), "
                "and report the app-visible stall the kernel measured; one pid; needs root for "
                "the kernel part")
      ->type_name("FILE");
  c->add_option("--timeout", co.timeout_s,
                "Seconds to wait for the process (every process of a job) to reach its cut and "
                "finish its GPU work; past it the checkpoint is abandoned and everything runs on "
                "(exit 10)")
      ->type_name("SECONDS")
      ->default_val(10)
      ->check(CLI::Range(0.1, 3600.0));
  c->add_flag("--tree", co.tree,
              "Checkpoint PID with all its descendants, as one job (what gcr always does: the "
              "flag says so in scripts)");
  c->add_flag("--job", co.job,
              "The pids are the roots of process trees started apart (by hand, by a scheduler) "
              "that make one job: checkpoint them as one, with one consistent cut (one CRIU dump "
              "per tree; unix sockets between the trees are connected again on restore)");
  c->add_option("--token-file", co.token_file,
                "With --job PID@HOST:PORT: the key of the job's other hosts (the file their gcr "
                "daemon --listen reads)")
      ->type_name("FILE");
  c->add_flag("--copy-parts", co.copy_parts,
              "With --job PID@HOST:PORT: once committed, copy every other host's part into this "
              "host's store too, so that a lost host's part can be restored elsewhere "
              "(gcr restore --place)");
  c->add_option("--peer-copies", co.peer_copies,
                "With --job PID@HOST:PORT: once committed, copy each host's part into the memory "
                "of this many other hosts of the job (each one's gcr daemon --peer-memory), so "
                "that a lost host's part is restored from memory on a replacement host (gcr "
                "restore --place)")
      ->type_name("M")
      ->check(CLI::Range(1, 16));
  c->add_option("--every", co.every,
                "With --job PID@HOST:PORT: do not checkpoint now, but have this host's gcrd "
                "checkpoint the job live every DURATION (500ms, 30s, 5m) as NAME.N (--name, "
                "default every-PID), the newest also NAME, until PID ends; gcr ps shows it")
      ->type_name("DURATION");
  c->add_option("--keep", co.keep,
                "With --every: keep the newest K checkpoints (on every host), removing older ones")
      ->type_name("K")
      ->default_val(3)
      ->check(CLI::Range(1, 10000));
  c->add_option("--host-timeout", co.idle_s,
                "With --job PID@HOST:PORT: seconds another host may say nothing before it is taken "
                "for gone and the checkpoint is abandoned everywhere")
      ->type_name("SECONDS")
      ->default_val(30)
      ->check(CLI::Range(0.1, 3600.0));
  c->add_option("--label", co.labels,
                "Keep KEY=VALUE with the checkpoint (in its META as label.KEY: gcr image inspect "
                "shows it); KEY of a-z, 0-9, '.' and '_'; repeat for several")
      ->type_name("KEY=VALUE")
      ->check([](const std::string& l) {
        auto eq = l.find('=');
        return eq == std::string::npos || eq == 0 ? std::string("a label is KEY=VALUE") : "";
      });
  c->add_flag("--json", co.json, "Machine-readable output");
  c->footer(
      "Without --leave-running the process is gone once the checkpoint is committed.\n\n"
      "A job: every process of PID's tree that runs under gcr is checkpointed with it, as one "
      "(one CRIU dump). Device memory they share (cuMemExportToShareableHandle / "
      "cuMemImportFromShareableHandle, cuIpcGetMemHandle / cuIpcOpenMemHandle) is stored once "
      "and shared again after a restore. Kernels that pass a pointer to shared memory are cut "
      "consistently: each one is issued on every process, or on none. Memory shared with a "
      "process outside the tree is refused before anything stops: checkpoint the job's launcher, "
      "or "
      "name every tree of the job with --job.");
  on_run(c, ctx, [&ctx] { return checkpoint(co, ctx); });

  static RestoreOptions ro;
  auto* r = app.add_subcommand("restore", "Restore a checkpoint as a running process");
  r->add_option("name", ro.name, "Tag or id of the checkpoint")->required();
  auto* device = r->add_option("--device", ro.device,
                               "Restore onto this GPU (ordinal) instead of the original one")
                     ->type_name("N");
  r->add_option("--device-map", ro.device_map,
                "Restore each GPU the checkpoint used onto another: FROM=TO pairs of ordinals, "
                "comma-separated, naming every GPU it used (a job spread over GPUs: 0=1,1=0)")
      ->type_name("MAP")
      ->excludes(device);
  r->add_flag("--eager", ro.eager,
              "Load all device and host memory before the process runs (default: the process "
              "runs at once and waits only for memory it touches before it has arrived)");
  r->add_flag("--new-pid-namespace", ro.new_pid_namespace,
              "Restore into a PID namespace of its own, where the process keeps its original pid "
              "(chosen by itself when that pid is taken on the host)");
  auto* clone = r->add_flag(
      "--clone", ro.clone,
      "Restore a second instance beside the original and other clones: PID and network "
      "namespaces of its own, its own device memory; what it listens on is its own (see "
      "--address, --netns; docs/serving.md). Root only");
  r->add_option("--netns", ro.netns,
                "With --clone: restore into this network namespace (a path: /run/netns/NAME, "
                "/proc/PID/ns/net), set up by the caller")
      ->type_name("PATH")
      ->needs(clone);
  auto* address = r->add_option("--address", ro.address,
                                "With --clone: the clone's address (A.B.C.D/N) on eth0, a veth "
                                "whose other end joins --bridge (without --address or --netns: "
                                "loopback only)")
                      ->type_name("CIDR")
                      ->needs(clone);
  auto* bridge = r->add_option("--bridge", ro.bridge,
                               "With --address: the host's bridge the clone's veth joins (made "
                               "and up already)")
                     ->type_name("BRIDGE");
  address->needs(bridge);
  bridge->needs(address);
  r->add_option("--gateway", ro.gateway, "With --address: the clone's default route")
      ->type_name("IP")
      ->needs(address);
  r->add_option("--hostname", ro.hostname,
                "With --clone: a UTS namespace of its own with this host name (default: the "
                "host's)")
      ->type_name("NAME")
      ->needs(clone);
  r->add_option("--stdin", ro.streams.stdin_file,
                "Give the process this file as stdin where it had a terminal, pipe or file")
      ->type_name("FILE");
  r->add_option("--stdout", ro.streams.stdout_file,
                "Append the process's stdout to this file instead (where it was a terminal, pipe "
                "or file)")
      ->type_name("FILE");
  r->add_option("--stderr", ro.streams.stderr_file, "The same for stderr")->type_name("FILE");
  r->add_flag("--detach", ro.streams.detach,
              "Do not connect the process to this terminal or pipe: /dev/null for stdin, and "
              "stdout and stderr appended to a log file (--log)");
  r->add_option("--log", ro.log, "With --detach: the log file (default gcr-ID.log here)")
      ->type_name("FILE");
  r->add_option("--accept-changed", ro.accept_changed,
                "A file the process had open for reading that changed since the checkpoint: "
                "restore it as it is now, at the old position (repeatable)")
      ->type_name("FILE");
  r->add_option("--trace", ro.trace,
                "Record the restore as the kernel saw it (eBPF: gcrd, CRIU and the restored "
                "process, every thread's scheduling and gate waits) beside gcrd's phases, into "
                "FILE (Chrome/Perfetto JSON), and report when CRIU and gcr's gate let go of the "
                "restored process; needs root for the kernel part")
      ->type_name("FILE");
  r->add_option("--token-file", ro.token_file,
                "A job across hosts (checkpointed with --job PID@HOST:PORT): the key of its other "
                "hosts, each of which restores its part")
      ->type_name("FILE");
  r->add_flag("--latest", ro.latest,
              "NAME is a schedule's (gcr run --checkpoint-every, gcr checkpoint --every): "
              "restore its newest checkpoint complete in some tier (NAME.N with the largest N "
              "whose every part is on its host or in a peer's memory; with --token-file). On a "
              "survivor whose memory holds a lost coordinator's part, with --place "
              "COORDINATOR=SPARE");
  r->add_option("--place", ro.place,
                "A job across hosts: restore the part of the host whose gcrd was OLD (HOST:PORT, "
                "as checkpointed) on the host whose gcrd is NEW, which takes the part's addresses "
                "(its peers reach it there); repeat for several")
      ->type_name("OLD=NEW");
  r->add_option("--host-timeout", ro.idle_s,
                "A job across hosts: seconds another host may say nothing before it is taken for "
                "gone and the restore is abandoned everywhere")
      ->type_name("SECONDS")
      ->default_val(30)
      ->check(CLI::Range(0.1, 3600.0));
  r->add_flag("--json", ro.json, "Machine-readable output");
  r->footer(
      "The restored process gets its original pid: on the host when it is free, else in a new "
      "PID namespace. The command returns once all device memory is loaded; the process may "
      "run well before that.\n"
      "\n"
      "Where the restored process's files go:\n"
      "  a log (a file it had open for writing or appending): appended to, as the file is now,\n"
      "    however it grew or was rotated since; --stdout/--stderr FILE for another file;\n"
      "  a terminal or pipe on its stdin/stdout/stderr: this command's own stdin/stdout/stderr\n"
      "    (so 'gcr restore NAME | tee log' works), or --stdin/--stdout/--stderr FILE, or with\n"
      "    --detach /dev/null and a log file; streams that shared one terminal get what stdout\n"
      "    gets;\n"
      "  a terminal or pipe elsewhere, to a process that is not part of the checkpoint:\n"
      "    /dev/null, with a warning;\n"
      "  a file it read that has changed since: an error naming it, unless --accept-changed.");
  on_run(r, ctx, [&ctx] { return restore(ro, ctx); });

  static DaemonOptions dopt;
  auto* d = app.add_subcommand("daemon",
                               "Run gcrd in the foreground (gcr starts it on demand otherwise)");
  d->add_option("--listen", dopt.listen,
                "Also serve other hosts over TCP (the destination of gcr migrate), on HOST:PORT, "
                "with a store of their own: --store/GCR_STORE when given, else 'served' beside "
                "the default store (never your checkpoints)")
      ->type_name("HOST:PORT");
  d->add_option("--token-file", dopt.token_file,
                "With --listen: the token other hosts must present (a file of 32+ characters, "
                "mode 0600); it lets them store checkpoints here and restore processes as the "
                "users --allow-uids names")
      ->type_name("FILE");
  d->add_option("--allow-uids", dopt.allow_uids,
                "With --listen: the users (uids, ranges: 0,1000-1999) a process restored for "
                "another host may run as; by default none. Uid 0 allows root, capabilities and "
                "group 0 too (docs/security.md)")
      ->type_name("LIST");
  d->add_option("--containers", dopt.containers,
                "With --listen: restore containers migrated here (gcr migrate --container), "
                "container NAME only from the bundle DIR/NAME prepared on this host (podman: as "
                "DIR/NAME/podman.conf allows; docs/containers.md)")
      ->type_name("DIR");
  d->add_option("--runtime", dopt.runtime,
                "With --containers: the runtime that restores them (default: runc in PATH; "
                "podman containers: this when it is a podman, else podman in PATH)")
      ->type_name("RUNTIME");
  d->add_option("--peer-memory", dopt.peer_memory,
                "With --listen: keep up to SIZE (512M, 4G) of other hosts' job checkpoints in "
                "this host's memory (gcr checkpoint --job ... --peer-copies); when full, the "
                "oldest copies go first, never those of the newest complete checkpoint, and a "
                "copy that would leave the host less than 10% of its memory free is refused")
      ->type_name("SIZE");
  d->add_option("--peer-memory-dir", dopt.peer_memory_dir,
                "With --peer-memory: where on a memory file system (default "
                "/dev/shm/gcr-peer-memory-PORT)")
      ->type_name("DIR");
  d->add_option("--peer-copy-mib-per-s", dopt.peer_copy_rate,
                "With --peer-memory: the most a copy into this host's memory may take of the "
                "link, in MiB/s (default: no bound), so that the job's own traffic keeps its share")
      ->type_name("N")
      ->check(CLI::PositiveNumber);
  on_run(d, ctx, [&ctx] { return daemon(dopt, ctx); });
}

}  // namespace gcr::cli
