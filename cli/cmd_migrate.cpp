// gcr migrate PID --to HOST:PORT: live migration of a process under gcr to another host's gcrd.
//
// Note [Migration]
// Pre-copy, then a short stop. Each round is a --leave-running checkpoint into the local store
// (incremental: write tracking's epochs hand each round exactly what was written since the one
// before, a write during a round included) pushed to the destination's store (gcr/store_transfer.h:
// chunks it already has are not sent). The process runs throughout; each round's stall is a live
// checkpoint's. When a round found less than --converge changed, or after --rounds, the last
// checkpoint stops the process and gcrd holds it stopped (CheckpointRequest::hold): the last
// changes go over, and the destination's gcrd restores the checkpoint from its own store, the
// process running there as soon as its memory is allocated (on demand). After each round the
// destination stages it on its GPU (Note [Staged restore] in daemon/staged.h), so the
// restore finds unchanged regions loaded and waits only for what the last rounds changed.
//
// At most one copy runs. Until the destination is asked to restore, any failure (the link, the
// destination, this command) lets the source run on with its memory back. The command tells gcrd
// "commit" before it asks the destination; from then on the source is the destination's: gcrd
// ends it when the destination has restored it, when the destination cannot be reached to say
// whether it did, or when this command goes away; should gcrd itself die after the commit, its
// keeper ends the process. A restore the destination refuses (an error it sends), or a
// destination host whose gcrd is gone (connections refused: its restored copy died with it), lets
// the source run on. The
// checkpoints stay in both stores whatever happens, so `gcr restore` on either host brings the
// process back should both copies be gone (the command died between "commit" and the restore).
#include <CLI/CLI.hpp>

#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "cmd_checkpoint.h"
#include "command_trace.h"
#include "container_runtime.h"
#include "context.h"
#include "gcr/control.h"
#include "gcr/criu.h"
#include "gcr/human_output.h"
#include "gcr/json.h"
#include "gcr/process_tree.h"
#include "gcr/store_transfer.h"
#include "gcrd_client.h"
#include "gcrd_protocol.h"
#include "images_archive.h"
#include "net_store.h"
#include "paths.h"
#include "remote.h"

namespace gcr::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct MigrateOptions {
  pid_t pid = 0;
  std::string container,
      runtime;  // --container NAME, --runtime RUNTIME (Note [Container migration])
  std::string to, token_file;
  int rounds = 5;
  std::string converge = "16M";
  std::string trace;  // --trace FILE
  bool json = false;
  // --job PID@HOST:PORT...: the rest of the job the process is a rank of (Note [A rank moved while
  // its job runs] in daemon/job_move.h), as remote.N / remote_pids.N of every checkpoint.
  std::vector<std::string> job;
};

// --job's ranks, grouped by host, into the fields of each checkpoint of the move.
Result<std::map<std::string, std::string>> job_fields(const MigrateOptions& o,
                                                      const gcrd::NetKey& key) {
  std::vector<std::pair<std::string, std::string>> hosts;  // HOST:PORT, "PID,PID"
  for (const std::string& a : o.job) {
    auto at = a.find('@');
    const std::string pid_text = a.substr(0, at);
    char* end = nullptr;
    long pid = std::strtol(pid_text.c_str(), &end, 10);
    if (at == std::string::npos || at == 0 || *end != '\0' || pid <= 0 || pid > (1 << 22) ||
        a.find(':', at) == std::string::npos)
      return Error{Errc::invalid_argument,
                   "--job " + a +
                       ": name each other rank of the job as PID@HOST:PORT (the gcrd of its host); "
                       "a rank on this host besides the one that moves is not supported yet"};
    const std::string where = a.substr(at + 1);
    auto it =
        std::find_if(hosts.begin(), hosts.end(), [&](const auto& h) { return h.first == where; });
    if (it == hosts.end()) it = hosts.insert(hosts.end(), {where, ""});
    it->second += (it->second.empty() ? "" : ",") + std::to_string(pid);
  }
  std::map<std::string, std::string> f{
      {"move", "1"}, {"net_key_name", key.name}, {"net_key", key.secret}};
  for (std::size_t k = 0; k < hosts.size(); ++k) {
    f["remote." + std::to_string(k)] = hosts[k].first;
    f["remote_pids." + std::to_string(k)] = hosts[k].second;
  }
  return f;
}

// --trace: the source process as the kernel saw it through the whole migration, beside gcrd's
// phases of every round (named "round N ...") and of the stop ("stop ...").
struct MigrateTrace {
  std::optional<CommandTrace> trace;
  std::map<std::string, std::string> spans;   // start.PHASE_ns / time.PHASE_ns
  std::map<std::string, std::string> fields;  // trace.* once finished
  bool finished = false;

  void add_phases(const std::string& prefix, const std::map<std::string, std::string>& f) {
    if (!trace) return;
    for (const auto& [k, v] : f)
      if (k.starts_with("start.") || k.starts_with("time."))
        spans[k.substr(0, k.find('.') + 1) + prefix + " " + k.substr(k.find('.') + 1)] = v;
  }
  // Writes the file; a failure to write it is reported, never the migration's.
  void finish(const std::string& file) {
    if (!trace || finished) return;
    finished = true;
    auto written = trace->finish(file, &spans);
    if (written)
      fields = std::move(written).value();
    else
      fields["trace.note.0"] = "--trace: " + written.error().message;
  }
};

struct Round {
  std::string id;
  std::uint64_t dirty = 0, sent = 0;
  std::uint64_t stall_ns = 0, push_ns = 0, stage_ns = 0;
  std::uint64_t job_stall_ns = 0;  // --job: the longest any rank was stalled
};

using gcrd::field_u64;

std::uint64_t since(Clock::time_point t) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count());
}

// After a restore request that got no answer: whether the destination host says its gcrd is gone
// (connections refused), which took whatever it restored with it. A gcrd still dying holds its
// listening socket while the kernel frees its memory (a connection is accepted, then reset, even
// before the hello is sent): asked again. One that answers, or a host that cannot be reached for
// 3 s (or within net_timeout(): a link cut), is not gone.
bool destination_gone(const std::string& to, const gcrd::NetKey& token) {
  const auto until = Clock::now() + std::chrono::seconds(3);
  for (int attempt = 0;; ++attempt) {
    if (attempt && Clock::now() >= until) return false;
    if (attempt) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto probe = gcrd::net_connect(to, token, "request");
    if (!probe) {
      if (probe.error().code == Errc::not_found) return true;
      continue;
    }
    bool answered = false;
    auto pong = gcrd::call(probe->get(), "ping", {}, nullptr, {}, &answered);
    if (pong || answered) return false;
  }
}

Status send_word(int fd, const char* word) {
  std::string line = std::string(word) + "\n";
  if (::send(fd, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size()))
    return errno_error("telling gcrd to " + std::string(word));
  return ok();
}

// Both ends of a migration's data: the local store its rounds checkpoint into, the destination's
// store they are pushed to.
struct Endpoints {
  gcrd::NetKey token;
  store::StoreLocation location;
  std::unique_ptr<store::Backend> dest, local;
  // What the destination holds, as the rounds left it: the stop's push reads no index there.
  std::unordered_map<store::ChunkId, store::PackId, store::Id128Hash> at_destination;
  bool bars = false;  // progress lines on a terminal
  // --job: the fields that make each checkpoint the moving rank's (job_fields).
  std::map<std::string, std::string> job_fields;

  Status push(Round& r, const std::string& label) {
    auto t = Clock::now();
    GCR_TRY_ASSIGN(auto id, store::resolve_checkpoint(*local, r.id));
    store::TransferOptions topt;
    topt.known_in_destination = &at_destination;
    ProgressLine bar(bars, label);
    topt.progress = [&bar](std::uint64_t done, std::uint64_t total) { bar.update(done, total); };
    auto rep = store::copy_checkpoint(*local, *dest, id, topt);
    bar.clear();
    if (!rep) return std::move(rep).error();
    r.sent = rep->copied_bytes;
    r.push_ns = since(t);
    return ok();
  }
};

using Say = std::function<void(const std::string&)>;

// A line for people on stderr ("gcr migrate: ..."), none with --json.
Say sayer(const MigrateOptions& o) {
  return [json = o.json](const std::string& line) {
    if (!json) std::fprintf(stderr, "gcr migrate: %s\n", line.c_str());
  };
}

// --json: the pre-copy rounds, an array "pre_copy".
void json_rounds(JsonWriter& j, const std::vector<Round>& rounds) {
  j.key("pre_copy").begin_array();
  for (const Round& r : rounds) {
    j.begin_object()
        .field("id", r.id)
        .field("dirty_bytes", r.dirty)
        .field("sent_bytes", r.sent)
        .field("stall_ns", r.stall_ns)
        .field("push_ns", r.push_ns)
        .field("stage_ns", r.stage_ns);
    if (r.job_stall_ns) j.field("job_stall_ns", r.job_stall_ns);
    j.end_object();
  }
  j.end_array();
}

// Pre-copy (Note [Migration]): live checkpoints of `pid`, each pushed to the destination and
// staged there, until a round finds at most --converge changed or --rounds are done.
// `device_only`: rounds of a container's processes, whose CRIU is the runtime's (Note [Container
// migration]): gcrd stores their device memory and runs no CRIU.
Result<std::vector<Round>> pre_copy(const MigrateOptions& o, pid_t pid, bool device_only,
                                    Endpoints& ends, const Say& say, MigrateTrace& mt) {
  const gcrd::NetKey& token = ends.token;
  const store::StoreLocation& location = ends.location;
  GCR_TRY_ASSIGN(std::uint64_t converge, parse_size(o.converge));
  std::vector<Round> rounds;
  const std::string whose =
      o.container.empty() ? "process " + std::to_string(pid) : "container " + o.container;
  for (int i = 0; i < o.rounds; ++i) {
    GCR_TRY_ASSIGN(UniqueFd conn, gcrd_connection());
    std::map<std::string, std::string> fields{{"pid", std::to_string(pid)},
                                              {"leave_running", "1"},
                                              {"store", location.directory.string()}};
    if (device_only) fields["device_only"] = "1";
    fields.insert(ends.job_fields.begin(), ends.job_fields.end());
    const std::string round = "round " + std::to_string(i + 1);
    ProgressLine storing(ends.bars, round + ": storing");
    auto f = gcrd::call(conn.get(), "checkpoint", fields,
                        [&](const std::string& line) { (void)draw_bytes_progress(storing, line); });
    storing.clear();
    if (!f) return std::move(f).context("pre-copy round " + std::to_string(i + 1)).error();
    if (f->count("kind") && f->at("kind") != "gcr")
      return Error{Errc::unsupported,
                   whose + " is not running under gcr (" +
                       (device_only ? std::string("no process of it answered gcr")
                                    : "its checkpoint was the driver's") +
                       "); gcr migrate moves processes started with 'gcr run'"};
    mt.add_phases("round " + std::to_string(i + 1), *f);
    Round r;
    r.id = f->at("id");
    r.dirty = field_u64(*f, "dirty_bytes");
    r.stall_ns = field_u64(*f, "time.stall_ns");
    r.job_stall_ns = field_u64(*f, "time.job_stall_ns");
    GCR_TRY(ends.push(r, round + ": sending")
                .context("sending pre-copy round " + std::to_string(i + 1) + " to " + o.to + " (" +
                         whose + " runs on)"));
    // Note [Staged restore]: the destination loads it onto its GPU while the process runs here.
    auto t_stage = Clock::now();
    auto staged = gcrd::net_stage(o.to, token, r.id);
    if (!staged)
      say("the destination did not stage round " + std::to_string(i + 1) + ": " +
          staged.error().message + " (it loads at the restore instead)");
    r.stage_ns = since(t_stage);
    say("round " + std::to_string(i + 1) + ": " + format_bytes(r.dirty) + " changed, " +
        format_bytes(r.sent) + " sent in " + format_duration(std::chrono::nanoseconds(r.push_ns)) +
        ", stall " + format_duration(std::chrono::nanoseconds(r.stall_ns)) +
        (o.job.empty()
             ? ""
             : " (the job's " + format_duration(std::chrono::nanoseconds(r.job_stall_ns)) + ")") +
        ", staged in " + format_duration(std::chrono::nanoseconds(r.stage_ns)));
    rounds.push_back(r);
    if (r.dirty <= converge) break;
  }
  return rounds;
}

Result<std::unique_ptr<Endpoints>> open_endpoints(const MigrateOptions& o, Context& ctx) {
  ::signal(SIGPIPE, SIG_IGN);  // a peer gone is an error to handle, never this command's end
  if (o.rounds < 0 || o.rounds > 100)
    return Error{Errc::invalid_argument, "--rounds takes 0 .. 100"};
  if (auto converge = parse_size(o.converge); !converge) return std::move(converge).error();
  auto e = std::make_unique<Endpoints>();
  e->bars = !o.json && ctx.stderr_tty;
  GCR_TRY_ASSIGN(e->token, gcrd::read_client_key(o.token_file));
  if (!o.job.empty()) {
    GCR_TRY_ASSIGN(e->job_fields, job_fields(o, e->token));
  }
  GCR_TRY_ASSIGN(e->location, ctx.store_location());
  if (e->location.is_s3())
    return Error{Errc::unsupported,
                 "gcr migrate checkpoints into a local store; --store is a bucket"};
  // The destination first: a wrong token or a host that does not answer fails before the process
  // is touched.
  GCR_TRY_ASSIGN(e->dest, gcrd::open_net_backend(o.to, e->token));
  GCR_TRY_ASSIGN(e->local, open_location(e->location, /*create=*/true));
  return e;
}

using Fields = std::map<std::string, std::string>;

// Tells gcrd, which holds the process stopped, to let it run on here; `e` then says whether it
// does.
Error resume_source(int conn, pid_t pid, Error e) {
  (void)send_word(conn, "resume");
  auto back = gcrd::read_reply(conn, nullptr);
  e.message +=
      back ? "; process " + std::to_string(pid) + " runs on here" : "; " + back.error().message;
  return e;
}

// The destination's restore: its report, and the connection that asked for it (open until the
// migration has been reported).
struct DestinationRestore {
  UniqueFd conn;
  Fields fields;
};

// After the commit: asks the destination to restore checkpoint `id`. On a failure gcrd here
// (`conn`) resumes the process, or ends it when it may run at the destination.
Result<DestinationRestore> restore_at_destination(const MigrateOptions& o,
                                                  const gcrd::NetKey& token, int conn,
                                                  const std::string& id, const Say& say) {
  auto rconn = gcrd::net_connect(o.to, token, "request");
  if (!rconn)  // never asked: it cannot run there
    return resume_source(conn, o.pid, std::move(rconn).error());
  bool refused = false;
  Fields fields{{"name", id}};
  // Note [A rank moved while its job runs]: the rank keeps its address, and the rest of the job
  // goes on once it runs there (its first "bytes loading": the rest of its memory comes on demand).
  if (!o.job.empty()) fields["take_addresses"] = "1";
  bool said_running = false;
  auto restored = gcrd::call(
      rconn->get(), "restore", fields,
      [&](const std::string& p) {
        auto bytes = gcrd::parse_bytes_progress(p);
        if (bytes && bytes->what == "loading" && !o.job.empty() && !said_running) {
          said_running = true;
          (void)send_word(conn, "running");
        }
        if (!bytes) say("destination: " + p);
      },
      {}, &refused);
  if (!restored && said_running) {
    // The rest of the job went on with the copy there: the one here is behind it, and must not
    // run again. Both stores keep the checkpoint.
    (void)send_word(conn, "end");
    (void)gcrd::read_reply(conn, nullptr);
    return Error{restored.error().code,
                 "the destination ran process " + std::to_string(o.pid) + " and then failed (" +
                     restored.error().message +
                     "); the copy here has ended, as the rest of its job went on with the one "
                     "there. 'gcr restore " +
                     id.substr(0, 12) + " --token-file ...' restores the rank from its checkpoint"};
  }
  if (!restored && refused)  // the destination said it did not restore it
    return resume_source(conn, o.pid,
                         std::move(restored).context("the destination's restore").error());
  if (!restored) {
    // Asked, and no answer. A destination host that refuses connections now has no gcrd, and a
    // gcrd that died mid-restore took its restored process with it (its keeper, or the process's
    // own pending loads): this copy runs on. Anything else may run there: this copy ends.
    if (destination_gone(o.to, token))
      return resume_source(
          conn, o.pid,
          std::move(restored).context("the destination's gcrd went away while restoring").error());
    (void)send_word(conn, "end");
    (void)gcrd::read_reply(conn, nullptr);
    return Error{restored.error().code,
                 "the destination was asked to restore checkpoint " + id.substr(0, 12) +
                     " and did not answer (" + restored.error().message + "); process " +
                     std::to_string(o.pid) + " has ended here. If it does not run on " + o.to +
                     ", 'gcr restore " + id.substr(0, 12) + "' on either host brings it back"};
  }
  return DestinationRestore{std::move(rconn).value(), std::move(restored).value()};
}

// The destination runs the process: tells gcrd here to end it. Its reply is the held checkpoint's
// report.
Result<Fields> end_source(int conn, pid_t pid, const std::optional<std::uint64_t>& started) {
  Status told = send_word(conn, "end");
  auto ended = told ? gcrd::read_reply(conn, nullptr) : Result<Fields>(told.error());
  if (!ended) {
    // gcrd went away after the commit: its keeper gave the process its memory back and let it
    // go on, but the destination runs it now. End this copy here (Note [Migration]).
    // (Unless it is gone already, and its pid someone else's.)
    if (started && criu::process_start_time(pid) == started) criu::kill_tree(pid);
  }
  return ended;
}

// The stop's times, as reported.
struct StopTimes {
  std::uint64_t stopped_to_sent = 0;    // from the stop to the last changes at the destination
  std::uint64_t restore = 0;            // the destination's restore, as this command waited on it
  std::uint64_t restore_to_resume = 0;  // of that, until the process ran there
  std::uint64_t downtime = 0, total = 0;
};

// A process's downtime ends when it runs at the destination, before its restore returns.
StopTimes process_stop_times(const Fields& restored, std::uint64_t stopped_to_sent,
                             std::uint64_t restore_ns, Clock::time_point t_begin) {
  StopTimes t;
  t.stopped_to_sent = stopped_to_sent;
  const std::uint64_t resume_ns = field_u64(restored, "time.resume_ns");
  // The destination's restore returns once all memory is loaded; the process ran from resume_ns.
  const std::uint64_t total_ns = field_u64(restored, "time.total_ns");
  const std::uint64_t after_resume = total_ns - std::min(resume_ns, total_ns);
  t.restore = restore_ns;
  t.restore_to_resume = t.restore > after_resume ? t.restore - after_resume : 0;
  t.downtime = stopped_to_sent + t.restore_to_resume;
  t.total = since(t_begin);
  return t;
}

// Finishes the trace and prints the migration of process o.pid: JSON, or a line.
void print_process_migrated(const MigrateOptions& o, MigrateTrace& mt,
                            const std::vector<Round>& rounds, const Round& last,
                            const Fields& restored, const Result<Fields>& ended,
                            const StopTimes& t) {
  if (ended) mt.add_phases("stop", *ended);  // the held checkpoint's report comes at its end
  mt.finish(o.trace);
  if (o.json) {
    JsonWriter j;
    j.begin_object();
    json_fields(j, mt.fields);
    j.field("pid", static_cast<std::int64_t>(o.pid))
        .field("to", o.to)
        .field("id", last.id)
        .field("destination_pid", static_cast<std::int64_t>(field_u64(restored, "pid")))
        .field("rounds", static_cast<std::uint64_t>(rounds.size()))
        .field("last_dirty_bytes", ended ? field_u64(*ended, "dirty_bytes") : 0)
        .field("last_sent_bytes", last.sent)
        .field("stop_stall_ns", ended ? field_u64(*ended, "time.stall_ns") : 0)
        .field("stop_push_ns", last.push_ns)
        .field("stopped_to_sent_ns", t.stopped_to_sent)
        .field("restore_to_resume_ns", t.restore_to_resume)
        .field("staged_bytes", field_u64(restored, "staged_bytes"))
        .field("downtime_ns", t.downtime)
        .field("total_ns", t.total);
    if (!o.job.empty())  // Note [A rank moved while its job runs]: the rest of the job held still
      j.field("job_stop_ns", ended ? field_u64(*ended, "time.job_stop_ns") : 0);
    j.key("destination_restore").begin_object();  // the destination's phases (time.*_ns)
    for (const auto& [k, v] : restored)
      if (k.starts_with("time.") || k.starts_with("start."))
        j.field(k, static_cast<std::uint64_t>(std::strtoull(v.c_str(), nullptr, 10)));
    j.end_object();
    json_rounds(j, rounds);
    j.end_object();
    print(j.take() + "\n");
  } else {
    print("migrated process " + std::to_string(o.pid) + " to " + o.to + " (pid " +
          std::to_string(field_u64(restored, "pid")) + " there) as checkpoint " +
          last.id.substr(0, 12) + ": " + std::to_string(rounds.size()) +
          " pre-copy round(s), then " + format_bytes(last.sent) +
          " sent while stopped; downtime about " +
          format_duration(std::chrono::nanoseconds(t.downtime)) +
          (o.job.empty() || !ended
               ? std::string()
               : ", the rest of the job held " + format_duration(std::chrono::nanoseconds(
                                                     field_u64(*ended, "time.job_stop_ns")))) +
          ", total " + format_duration(std::chrono::nanoseconds(t.total)) + "\n");
    if (mt.trace) std::fputs(describe_trace(mt.fields).c_str(), stderr);
  }
}

Status migrate(const MigrateOptions& o, Context& ctx, MigrateTrace& mt) {
  GCR_TRY_ASSIGN(std::unique_ptr<Endpoints> ends, open_endpoints(o, ctx));
  const Say say = sayer(o);
  const auto t_begin = Clock::now();
  const std::optional<std::uint64_t> started = criu::process_start_time(o.pid);
  GCR_TRY_ASSIGN(std::vector<Round> rounds, pre_copy(o, o.pid, false, *ends, say, mt));
  // The stop: gcrd holds the process stopped once the last checkpoint is committed.
  const auto t_stop = Clock::now();
  GCR_TRY_ASSIGN(UniqueFd conn, gcrd_connection());
  Fields stop{
      {"pid", std::to_string(o.pid)}, {"hold", "1"}, {"store", ends->location.directory.string()}};
  stop.insert(ends->job_fields.begin(), ends->job_fields.end());
  auto held = gcrd::call(conn.get(), "checkpoint", stop, nullptr);
  if (!held) return std::move(held).context("the last checkpoint (the process runs on)").error();
  Round last;
  last.id = held->at("id");
  if (Status s = ends->push(last, "sending the last changes"); !s)
    return resume_source(conn.get(), o.pid,
                         std::move(s).context("sending the last changes").error());
  const std::uint64_t stopped_to_sent = since(t_stop);
  GCR_TRY(send_word(conn.get(), "commit"));
  // From here the process is the destination's (Note [Migration]).
  const auto t_restore = Clock::now();
  GCR_TRY_ASSIGN(DestinationRestore restored,
                 restore_at_destination(o, ends->token, conn.get(), last.id, say));
  const std::uint64_t restore_ns = since(t_restore);  // not the source's end, which follows
  const Result<Fields> ended = end_source(conn.get(), o.pid, started);
  const StopTimes times = process_stop_times(restored.fields, stopped_to_sent, restore_ns, t_begin);
  print_process_migrated(o, mt, rounds, last, restored.fields, ended, times);
  if (!ended)
    return Error{ended.error().code,
                 "the destination runs the process; gcrd here failed before ending it (" +
                     ended.error().message + "); its keeper, or gcr migrate, ended process " +
                     std::to_string(o.pid) + " here"};
  return ok();
}

// Note [Container migration]
// gcr migrate --container NAME: the same pre-copy, with the runtime doing the stop. The rounds
// are device-only checkpoints of the container's processes: gcrd stores what their device memory
// changed (Note [CRIU run by someone else] in daemon/checkpoint.h, with no CRIU at all) and
// they run on, each round's stall being that store. The stop is `runc checkpoint` through gcr's
// plugin: the container ends, the plugin's checkpoint (only what changed since the last round)
// lands in the local store by reference, and it and CRIU's images (~1 MiB: device memory is not
// in them) go to the destination, whose gcrd runs `runc restore` from the bundle its operator
// prepared (Note [Containers restored for a network peer] in daemon/container_host.h).
//
// podman is the same with its own commands: its state from `podman container inspect`, the stop
// `podman container checkpoint --export --keep` (one archive: CRIU's images, the container's
// configuration, its root file system's changes), which the destination imports where its
// operator allows that configuration (Note [podman archives restored for a network peer] in
// daemon/podman_import.h). Its CRIU gets gcr's settings through PATH (Note [podman's CRIU] in
// gcrd-net/podman_runtime.h). A failed move restores it here from the images the checkpoint kept
// (`podman container restore NAME`); a move that succeeded removes podman's stopped container here.
//
// At most one copy runs. A failure before the destination has the whole request (the link, the
// destination, the push), a restore it refuses, or a destination whose gcrd is gone, restores
// the container here from the same images: a longer stop, nothing lost. A destination that got
// the request and cannot be reached to say how it went may run it: nothing is restored here, and
// the images stay for `runc restore` here should it not run there. The checkpoints stay in both
// stores.

// The runtime, with the CRIU and plugin its checkpoint and restore run: --runtime (runc, podman,
// or a path: its kind is what its --version says), else runc when it knows the container, else
// podman when it does.
Result<gcrd::ContainerRuntime> container_runtime(const MigrateOptions& o, const Endpoints& ends) {
  GCR_TRY_ASSIGN(criu::Tools tools, criu::find_tools(self_dir()));
  GCR_TRY_ASSIGN(std::filesystem::path driver, real_driver_path());  // the driver gcrd uses
  gcrd::ContainerRuntime rt{
      {},    tools.criu, tools.plugin_dir, gcrd::default_socket_path(), ends.location.directory,
      driver};
  if (!o.runtime.empty()) {
    GCR_TRY_ASSIGN(rt.binary, gcrd::find_container_runtime(o.runtime));
    GCR_TRY_ASSIGN(rt.kind, gcrd::container_runtime_kind(rt.binary));
    return rt;
  }
  auto runc = gcrd::find_container_runtime("runc");
  if (runc) {
    rt.binary = *runc;
    if (gcrd::container_state(rt, o.container)) return rt;
  }
  if (auto podman = gcrd::find_container_runtime("podman")) {
    gcrd::ContainerRuntime p = rt;
    p.binary = *podman;
    p.kind = gcrd::RuntimeKind::podman;
    if (gcrd::container_state(p, o.container)) return p;
  }
  if (!runc) return std::move(runc).error();
  return rt;  // runc's "no container" is the error
}

// The container's state, once it is running and some process of it runs under gcr.
Result<gcrd::ContainerState> running_container(const MigrateOptions& o,
                                               const gcrd::ContainerRuntime& rt) {
  GCR_TRY_ASSIGN(gcrd::ContainerState state, gcrd::container_state(rt, o.container));
  if (state.status != "running" || state.pid <= 0)
    return Error{Errc::invalid_argument, "container " + o.container + " is " + state.status +
                                             "; gcr migrate moves a running container"};
  // Before anything stops (a round checks it too, but --rounds 0 has none): some process of the
  // container runs under gcr.
  {
    const auto managed = control::find_managed_processes();
    bool any = false;
    for (pid_t p : criu::tree_pids(state.pid))
      any |= std::find(managed.begin(), managed.end(), p) != managed.end();
    if (!any)
      return Error{Errc::unsupported,
                   "container " + o.container +
                       " is not running under gcr (none of its processes answers gcr); gcr "
                       "migrate moves processes started with 'gcr run'"};
  }
  return state;
}

// A container being stopped into its images (Note [Container migration]).
struct ContainerImages {
  const MigrateOptions& o;
  const gcrd::ContainerRuntime& rt;
  const gcrd::ContainerState& state;
  std::filesystem::path work, images;

  // Restores the stopped container here after the failure `e`, which then says whether it runs on.
  Error restore_here(Error e) const {
    // The plugin of that restore reaches gcrd and starts none: a gcrd that died since the stop
    // is started again first (its store holds the checkpoint).
    auto started = gcrd_connection();
    auto back =
        started ? gcrd::restore_checkpointed_container(rt, o.container, state.bundle, images, work)
                : Status(std::move(started).error());
    e.message += back ? "; container " + o.container + " restored here and runs on"
                      : "; restoring it here failed too (" + back.error().message +
                            "): its images are in " + images.string();
    std::error_code ec;
    if (back) std::filesystem::remove_all(images, ec);  // the runtime's logs stay
    return e;
  }
};

// A private directory (mkdtemp: 0700) for CRIU's logs, with the images in it.
Result<ContainerImages> make_images_directory(const MigrateOptions& o,
                                              const gcrd::ContainerRuntime& rt,
                                              const gcrd::ContainerState& state) {
  std::string tmpl = "/var/tmp/gcr-migrate-" + o.container + ".XXXXXX";
  if (!::mkdtemp(tmpl.data())) return errno_error("a directory for the container's images");
  const std::filesystem::path work = tmpl;
  ContainerImages c{o, rt, state, work, work / "images"};
  std::error_code ec;
  std::filesystem::create_directory(c.images, ec);
  return c;
}

// `runc checkpoint` (`podman container checkpoint --export`) of the container into c.images; the
// error says whether it runs on.
Status stop_container(const ContainerImages& c) {
  if (Status s = gcrd::checkpoint_container(c.rt, c.o.container, c.images, c.work); !s) {
    auto now = gcrd::container_state(c.rt, c.o.container);
    const bool runs = now && now->status == "running";
    return std::move(s)
        .context(runs ? "the container runs on here"
                      : "the container is stopped here; its images are in " + c.images.string())
        .error();
  }
  return ok();
}

// The checkpoint gcr's CRIU plugin stored the container's device memory as.
Result<gcrd::ImagesReference> read_images_reference(const ContainerImages& c) {
  auto text = gcrd::read_checkpoint_reference(c.rt, c.images);
  if (!text && text.error().code == Errc::not_found)
    return Error{
        Errc::unsupported,
        "gcr's CRIU plugin stored no device memory for container " + c.o.container + " (see " +
            (c.work / (c.rt.kind == gcrd::RuntimeKind::podman ? "runtime.log" : "dump.log"))
                .string() +
            ")"};
  if (!text) return std::move(text).error();
  return gcrd::decode_reference(*text);
}

// The destination's restore of the container: the connection that asked for it (open until the
// migration has been reported), what was sent on it, and its report.
struct ContainerRestore {
  UniqueFd conn;
  gcrd::ImagesSent images_sent;
  Fields fields;
};

// Asks the destination to restore the container from checkpoint `id` and the images. A failure
// restores it here, unless the destination may run it.
Result<ContainerRestore> restore_container_at_destination(const ContainerImages& c,
                                                          const gcrd::NetKey& token,
                                                          const std::string& id, const Say& say) {
  const MigrateOptions& o = c.o;
  auto rconn = gcrd::net_connect(o.to, token, "request");
  if (!rconn) return c.restore_here(std::move(rconn).error());
  Fields fields{{"name", o.container}, {"id", id}};
  if (c.rt.kind != gcrd::RuntimeKind::runc)  // docs/protocol.md §14: runc when absent
    fields["runtime"] = gcrd::runtime_kind_name(c.rt.kind);
  const std::string request =
      std::string(gcrd::kProtocol) + " restore_container " + gcrd::encode_fields(fields) + "\n";
  bool sent = ::send(rconn->get(), request.data(), request.size(), MSG_NOSIGNAL) ==
              static_cast<ssize_t>(request.size());
  auto images_sent = sent ? gcrd::send_images(rconn->get(), c.images)
                          : Result<gcrd::ImagesSent>(errno_error("writing to the network"));
  if (!images_sent)  // the destination cannot restore without every byte
    return c.restore_here(std::move(images_sent).context("sending the images to " + o.to).error());
  bool refused = false;
  auto restored = gcrd::read_reply(
      rconn->get(),
      [&](const std::string& p) {
        if (!gcrd::parse_bytes_progress(p)) say("destination: " + p);
      },
      &refused);
  if (!restored && (refused || destination_gone(o.to, token)))
    return c.restore_here(std::move(restored).context("the destination's restore").error());
  if (!restored)
    return Error{
        restored.error().code,
        "the destination was asked to restore container " + o.container + " and did not answer (" +
            restored.error().message + "); it is stopped here. If it does not run on " + o.to +
            ", '" +
            gcrd::restore_checkpointed_command(c.rt, o.container, c.state.bundle, c.images) +
            "' brings it back here"};
  return ContainerRestore{std::move(rconn).value(), std::move(images_sent).value(),
                          std::move(restored).value()};
}

// Finishes the trace and prints the migration of container o.container: JSON, or a line.
void print_container_migrated(const MigrateOptions& o, MigrateTrace& mt, pid_t pid,
                              const std::vector<Round>& rounds, const Round& last,
                              const ContainerRestore& restored, const StopTimes& t) {
  mt.finish(o.trace);
  if (o.json) {
    JsonWriter j;
    j.begin_object();
    json_fields(j, mt.fields);
    j.field("container", o.container)
        .field("pid", static_cast<std::int64_t>(pid))
        .field("to", o.to)
        .field("id", last.id)
        .field("destination_pid", static_cast<std::int64_t>(field_u64(restored.fields, "pid")))
        .field("rounds", static_cast<std::uint64_t>(rounds.size()))
        .field("last_sent_bytes", last.sent)
        .field("images_bytes", restored.images_sent.bytes)
        .field("stop_push_ns", last.push_ns)
        .field("stopped_to_sent_ns", t.stopped_to_sent)
        .field("restore_ns", t.restore)
        .field("downtime_ns", t.downtime)
        .field("total_ns", t.total);
    json_rounds(j, rounds);
    j.end_object();
    print(j.take() + "\n");
  } else {
    print("migrated container " + o.container + " to " + o.to + " (pid " +
          std::to_string(field_u64(restored.fields, "pid")) + " there) as checkpoint " +
          last.id.substr(0, 12) + ": " + std::to_string(rounds.size()) +
          " pre-copy round(s), then " + format_bytes(last.sent) + " of device memory and " +
          format_bytes(restored.images_sent.bytes) +
          " of CRIU images sent while stopped; downtime " +
          format_duration(std::chrono::nanoseconds(t.downtime)) + ", total " +
          format_duration(std::chrono::nanoseconds(t.total)) + "\n");
    if (mt.trace) std::fputs(describe_trace(mt.fields).c_str(), stderr);
  }
}

Status migrate_container(const MigrateOptions& o, Context& ctx, MigrateTrace& mt) {
  GCR_TRY_ASSIGN(std::unique_ptr<Endpoints> ends, open_endpoints(o, ctx));
  const Say say = sayer(o);
  GCR_TRY_ASSIGN(const gcrd::ContainerRuntime rt, container_runtime(o, *ends));
  GCR_TRY_ASSIGN(const gcrd::ContainerState state, running_container(o, rt));
  const auto t_begin = Clock::now();
  GCR_TRY_ASSIGN(std::vector<Round> rounds, pre_copy(o, state.pid, true, *ends, say, mt));

  // The stop. The images are the container's memory: a private directory (mkdtemp: 0700).
  GCR_TRY_ASSIGN(const ContainerImages c, make_images_directory(o, rt, state));
  const auto t_stop = Clock::now();
  say("stopping container " + o.container + " (" + gcrd::runtime_kind_name(rt.kind) +
      " checkpoint)");
  GCR_TRY(stop_container(c));
  // From here the container exists only as its images: any failure restores it (here or there).
  auto ref = read_images_reference(c);
  if (!ref) return c.restore_here(std::move(ref).error());
  Round last;
  last.id = ref->id;
  if (Status s = ends->push(last, "sending the last changes"); !s)
    return c.restore_here(std::move(s).context("sending the last changes").error());
  StopTimes t;
  t.stopped_to_sent = since(t_stop);

  auto t_restore = Clock::now();
  GCR_TRY_ASSIGN(ContainerRestore restored,
                 restore_container_at_destination(c, ends->token, last.id, say));
  t.restore = since(t_restore);
  t.downtime = since(t_stop);
  t.total = since(t_begin);
  // podman's stopped container here, and the images its checkpoint kept: the copy there runs.
  if (Status removed = gcrd::remove_checkpointed_container(rt, o.container, c.work); !removed)
    say("container " + o.container + " runs on " + o.to + "; " + removed.error().message);
  std::error_code ec;
  std::filesystem::remove_all(c.work, ec);
  print_container_migrated(o, mt, state.pid, rounds, last, restored, t);
  return ok();
}

}  // namespace

void register_migrate_command(CLI::App& app, Context& ctx) {
  static MigrateOptions o;
  auto* m = app.add_subcommand(
      "migrate",
      "Move a running process to another host's gcrd (gcr daemon --listen there): pre-copy "
      "rounds while it runs, then a short stop");
  m->add_option("pid", o.pid, "The process (and its tree) to move");
  m->add_option("--container", o.container,
                "Move this container instead (runc or podman; the destination's gcrd restores it "
                "from its own bundle of that name, or imports podman's checkpoint of it where its "
                "DIR/NAME/podman.conf allows: gcr daemon --listen ... --containers DIR)")
      ->type_name("NAME");
  m->add_option("--runtime", o.runtime,
                "The container runtime: runc, podman, or a path (a script that runs either with "
                "options of its own); default: runc when it knows the container, else podman")
      ->type_name("RUNTIME");
  m->add_option("--to", o.to, "The destination gcrd's HOST:PORT")
      ->required()
      ->type_name("HOST:PORT");
  m->add_option("--token-file", o.token_file,
                "The destination's token (the file its gcr daemon --listen reads)")
      ->required()
      ->type_name("FILE");
  m->add_option("--job", o.job,
                "The process is a rank of a job across hosts: its other ranks, each PID@HOST:PORT "
                "(the gcrd of its host). They run on through the pre-copy and are held still only "
                "for the stop; the rank keeps its address (a /32 of its own on this host), which "
                "moves with it (docs/jobs.md)")
      ->type_name("PID@HOST:PORT...");
  m->add_option("--rounds", o.rounds, "Pre-copy rounds at most (default 5; 0: stop at once)")
      ->type_name("N");
  m->add_option("--converge", o.converge,
                "Stop pre-copying once a round found at most this much changed (default 16M)")
      ->type_name("SIZE");
  m->add_option("--trace", o.trace,
                "Record the migration as the kernel saw the process (eBPF: its threads' "
                "scheduling, CRIU's hold, waits at gcr's gate) beside gcrd's phases of every "
                "round and of the stop, into FILE (Chrome/Perfetto JSON); needs root for the "
                "kernel part")
      ->type_name("FILE");
  m->add_flag("--json", o.json, "Print JSON: rounds, bytes, downtime_ns, total_ns");
  m->footer(
      "At most one copy runs: until the destination is asked to restore, any failure lets the "
      "process run on here; once it is asked, the process here ends when the destination has "
      "restored it, or cannot tell whether it did (this command going away included). Both "
      "stores keep the checkpoints: 'gcr restore' brings the process back on either host.");
  on_run(m, ctx, [&ctx] {
    if ((o.pid > 0) == !o.container.empty())
      return Status(Error{Errc::invalid_argument,
                          "gcr migrate takes a PID or --container NAME (one of them)"});
    if (!o.container.empty() && !o.job.empty())
      return Status(Error{Errc::invalid_argument, "--job moves a rank's process, not a container"});
    if (!o.container.empty() && !o.trace.empty())
      return Status(Error{Errc::invalid_argument,
                          "--trace follows a process; a container's migration has no --trace yet"});
    MigrateTrace mt;
    if (!o.trace.empty()) mt.trace = CommandTrace::begin(o.pid);
    Status s = o.container.empty() ? migrate(o, ctx, mt) : migrate_container(o, ctx, mt);
    if (!s && mt.trace) {  // the trace of a failed migration is written too
      mt.finish(o.trace);
      std::fputs(describe_trace(mt.fields).c_str(), stderr);
    }
    return s;
  });
}

}  // namespace gcr::cli
