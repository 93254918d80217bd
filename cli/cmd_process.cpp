#include "cmd_process.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "cmd_checkpoint.h"
#include "gcr/control.h"
#include "gcr/human_output.h"
#include "gcr/json.h"
#include "gcr/settings.h"
#include "gcr/unique_fd.h"
#include "gcrd_client.h"
#include "paths.h"

namespace gcr::cli {
// "500ms", "2s", "1.5m", "1h" (a bare number: seconds).
Result<std::chrono::milliseconds> parse_period(const std::string& text, const std::string& option) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const std::string unit = end ? std::string(end) : std::string();
  double ms = -1;
  if (unit == "ms")
    ms = v;
  else if (unit.empty() || unit == "s")
    ms = v * 1e3;
  else if (unit == "m" || unit == "min")
    ms = v * 60e3;
  else if (unit == "h")
    ms = v * 3600e3;
  if (end == text.c_str() || ms < 100 || ms > 7 * 24 * 3600e3)
    return Error{
        Errc::invalid_argument,
        option + " takes a duration from 100ms to 7 days (500ms, 30s, 5m, 1h), not '" + text + "'"};
  return std::chrono::milliseconds(static_cast<std::int64_t>(ms));
}

namespace {

struct RunOptions {
  std::vector<std::string> command;
  std::string track;
  std::string track_profile;  // --track-profile FILE: GCR_TRACK_PROFILE (interpose/validate.h)
  bool detach = false;
  std::string log;  // --log: where a detached program's stdout and stderr go
  // Note [Checkpoints every period] (daemon/periodic.h)
  std::string every;  // --checkpoint-every DURATION
  unsigned keep = 3;
  std::string every_name;
};

// Note [Checkpoints every period]: gcrd checkpoints this process (the program, once it is
// exec'd: the same pid) every period.
Status schedule_checkpoints(const RunOptions& o, Context& ctx) {
  GCR_TRY_ASSIGN(std::chrono::milliseconds every, parse_period(o.every, "--checkpoint-every"));
  GCR_TRY_ASSIGN(store::StoreLocation location, ctx.store_location());
  if (location.is_s3())
    return Error{Errc::unsupported,
                 "--checkpoint-every checkpoints into a local store; --store is a bucket"};
  GCR_TRY_ASSIGN(UniqueFd conn, gcrd_connection());
  auto r = gcrd::call(conn.get(), "every",
                      {{"pid", std::to_string(::getpid())},
                       {"every_ms", std::to_string(every.count())},
                       {"keep", std::to_string(o.keep)},
                       {"name", o.every_name},
                       {"store", location.directory.string()}},
                      nullptr);
  if (!r) return std::move(r).context("--checkpoint-every").error();
  return ok();
}

// In a detached child: the close-on-exec pipe its parent reads, for a failure before the exec.
int g_detach_report_fd = -1;

// --detach: the program runs in a session of its own (no terminal: a hangup or Ctrl-C in this
// one does not reach it), stdin /dev/null, stdout and stderr appended to a log file; gcr prints
// its pid and returns.
Status detach(const RunOptions& o) {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return errno_error("pipe");
  pid_t child = fork();
  if (child < 0) return errno_error("fork");
  if (child == 0) {
    close(ready[0]);
    setsid();
    std::string log = o.log.empty() ? "gcr-" + std::to_string(getpid()) + ".log" : o.log;
    int in = open("/dev/null", O_RDONLY);
    int out = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (in < 0 || out < 0) {
      std::string msg =
          "cannot open " + std::string(in < 0 ? "/dev/null" : log) + ": " + std::strerror(errno);
      (void)!write(ready[1], msg.data(), msg.size());
      _exit(127);
    }
    dup2(in, 0);
    dup2(out, 1);
    dup2(out, 2);
    close(in);
    close(out);
    g_detach_report_fd = ready[1];
    return ok();  // run_program goes on to exec; an exec failure is written to `ready`
  }
  close(ready[1]);
  char buf[512];
  ssize_t n = read(ready[0], buf, sizeof buf);  // EOF: the program was executed
  close(ready[0]);
  if (n > 0) {
    waitpid(child, nullptr, 0);
    return Error{Errc::io_error, std::string(buf, static_cast<std::size_t>(n))};
  }
  std::string log = o.log.empty() ? "gcr-" + std::to_string(child) + ".log" : o.log;
  std::printf("%d\n", child);
  std::fflush(stdout);
  std::fprintf(stderr, "gcr: started pid %d in the background; its output goes to %s\n", child,
               log.c_str());
  std::_Exit(0);
}

Status run_program(const RunOptions& o, Context& ctx) {
  if (o.command.empty())
    return Error{Errc::invalid_argument, "no program given: gcr run -- PROGRAM ARGS..."};
  if (!o.track.empty() && o.track != "speculative" && o.track != "precise" &&
      o.track != "conservative" && o.track != "validate")
    return Error{Errc::invalid_argument,
                 "--track must be speculative, precise, conservative or "
                 "validate, not '" +
                     o.track + "'"};
  GCR_TRY_ASSIGN(auto interposer, interposer_path());
  bool simulated = false;
  GCR_TRY_ASSIGN(auto driver, real_driver_path(&simulated));
  std::string preload = interposer.string();
  if (const char* old = std::getenv("LD_PRELOAD"); old && *old) preload += ":" + std::string(old);
  setenv("LD_PRELOAD", preload.c_str(), 1);
  setenv("GCR_REAL_LIBCUDA", driver.c_str(), 1);
  if (!o.track.empty()) setenv("GCR_TRACK", o.track.c_str(), 1);
  if (!o.track_profile.empty()) {
    std::error_code ec;
    auto path = std::filesystem::absolute(o.track_profile, ec);  // the program may chdir
    setenv("GCR_TRACK_PROFILE", (ec ? std::filesystem::path(o.track_profile) : path).c_str(), 1);
  }
  // A program that opens libcuda.so.1 by name finds gcr's first, also in its children.
  std::string libpath = interposer.parent_path().string();
  if (const char* old = std::getenv("LD_LIBRARY_PATH"); old && *old)
    libpath += ":" + std::string(old);
  setenv("LD_LIBRARY_PATH", libpath.c_str(), 1);
  if (simulated && !settings().quiet)
    std::fprintf(stderr, "gcr: no NVIDIA driver found; running on simgpu (%s)\n", driver.c_str());
  std::vector<char*> argv;
  for (const auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(nullptr);
  if (o.detach) GCR_TRY(detach(o));  // returns in the child only
  if (!o.every.empty()) {
    Status s = schedule_checkpoints(o, ctx);
    if (!s && g_detach_report_fd >= 0) {
      (void)!write(g_detach_report_fd, s.error().message.data(), s.error().message.size());
      _exit(127);
    }
    GCR_TRY(std::move(s));
  }
  execvp(argv[0], argv.data());
  Error e = errno_error("cannot run '" + o.command[0] + "'");
  if (g_detach_report_fd >= 0) {  // tell the parent, which is waiting on the pipe
    (void)!write(g_detach_report_fd, e.message.data(), e.message.size());
    _exit(127);
  }
  return e;
}

std::string cmdline_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && s.back() == '\0') s.pop_back();
  for (char& c : s)
    if (c == '\0') c = ' ';
  return s;
}

// What a running gcrd is doing to which process (a checkpoint that holds its control session, so
// that the process cannot answer for itself): pid -> state and phase. Starts no gcrd.
struct GcrdWork {
  std::string state, phase;
};
// Note [Checkpoints every period]: a process's schedule, as gcrd says it (its every.PID.* fields).
using EverySchedules = std::map<pid_t, std::map<std::string, std::string>>;
// Note [Checkpoints in peers' memory] (daemon/memory_tier.h): gcrd's tier.* fields, if it keeps
// one.
std::map<std::string, std::string> g_peer_memory;
std::map<pid_t, GcrdWork> gcrd_work(EverySchedules* every = nullptr) {
  std::map<pid_t, GcrdWork> out;
  auto fd = gcrd::connect_running(gcrd::default_socket_path());
  if (!fd) return out;
  UniqueFd connection(*fd);
  auto reply = gcrd::call(connection.get(), "work", {}, nullptr);
  if (!reply) {
    std::fprintf(stderr,
                 "gcr: gcrd did not say what it is doing (%s): checkpoints under way and "
                 "schedules are not shown\n",
                 reply.error().message.c_str());
    return out;
  }
  for (const auto& [key, value] : *reply) {
    if (key.rfind("tier.", 0) == 0) {
      g_peer_memory[key.substr(5)] = value;
      continue;
    }
    if (every && key.rfind("every.", 0) == 0) {
      auto d = key.find('.', 6);
      if (d != std::string::npos)
        (*every)[std::atoi(key.substr(6, d - 6).c_str())][key.substr(d + 1)] = value;
      continue;
    }
    auto dot = key.find('.', 4);
    if (key.rfind("pid.", 0) != 0 || dot == std::string::npos) continue;
    pid_t pid = std::atoi(key.substr(4, dot - 4).c_str());
    if (key.substr(dot + 1) == "state") out[pid].state = value;
    if (key.substr(dot + 1) == "phase") out[pid].phase = value;
  }
  return out;
}

struct ProcessRow {
  pid_t pid;
  std::string command;
  control::StatusInfo status;
  std::string error;
  // A checkpoint of gcrd's under way holds its session: the state and phase gcrd says.
  std::string gcrd_state, checkpoint_phase;
  std::vector<control::ShareRecord> shares;  // device memory shared with other processes
  std::set<pid_t> peers;                     // the listed processes it shares it with
  std::map<std::string, std::string> every;  // its schedule of checkpoints, if any
};

// Asks each row's process for its status and shares, but not those whose session gcrd holds
// (`work`). Returns how many were asked.
std::size_t ask_processes(std::vector<ProcessRow>& rows, const std::map<pid_t, GcrdWork>& work) {
  // Each process is asked on a thread of its own: one that cannot answer (busy with another gcr,
  // stopped, frozen by a checkpoint that began after it let us in) holds up its own row for 2 s
  // to connect and 2 s to answer, not the others' (and not the 60 s a checkpoint's replies get).
  std::vector<std::thread> asking;
  for (ProcessRow& r : rows) {
    if (work.contains(r.pid)) continue;  // gcrd holds its session: gcrd says (below)
    asking.emplace_back([&r] {
      auto client = control::Client::connect(r.pid, std::chrono::seconds(2));
      if (client) client->set_reply_timeout(std::chrono::seconds(2));
      if (!client) {
        r.error = client.error().message;
      } else if (auto st = client->status()) {
        r.status = *st;
        if (auto shares = client->shares()) r.shares = std::move(shares).value();
        (void)client->close();
      } else {
        r.error = st.error().message;
      }
    });
  }
  for (std::thread& t : asking) t.join();
  return asking.size();
}

// The processes running under gcr, each with what it (or gcrd, for one being checkpointed) says.
std::vector<ProcessRow> collect_process_rows() {
  std::vector<ProcessRow> rows;
  EverySchedules every;
  const std::map<pid_t, GcrdWork> work = gcrd_work(&every);
  for (pid_t pid : control::find_managed_processes())
    rows.push_back(ProcessRow{pid, cmdline_of(pid), {}, {}, {}, {}, {}, {}, every[pid]});
  const std::size_t asked = ask_processes(rows, work);
  // A checkpoint that began meanwhile (its process was busy): gcrd says what it made of it.
  const std::map<pid_t, GcrdWork> later = asked == 0 ? work : gcrd_work();
  for (ProcessRow& r : rows) {
    auto it = later.find(r.pid);
    if (it == later.end() && (it = work.find(r.pid)) == work.end()) continue;
    r.gcrd_state = it->second.state;
    r.checkpoint_phase = it->second.phase;
    r.error.clear();
  }
  return rows;
}

void find_share_peers(std::vector<ProcessRow>& rows) {
  // Note [Shared regions]: processes whose share keys meet map the same memory.
  std::map<std::uint64_t, std::set<pid_t>> by_key;
  for (const ProcessRow& r : rows)
    for (const control::ShareRecord& sh : r.shares)
      for (std::uint64_t k : sh.keys) by_key[k].insert(r.pid);
  for (ProcessRow& r : rows)
    for (const control::ShareRecord& sh : r.shares)
      for (std::uint64_t k : sh.keys)
        for (pid_t p : by_key[k])
          if (p != r.pid) r.peers.insert(p);
}

std::string shared_text(const ProcessRow& r) {
  if (r.shares.empty()) return std::string("-");
  std::string t = std::to_string(r.shares.size());
  if (r.peers.empty()) return t + " (no peer here)";
  std::string with;
  for (pid_t p : r.peers) with += (with.empty() ? "" : ",") + std::to_string(p);
  return t + " with " + with;
}

// "3ecac3fccee0", or with a schedule (Note [Checkpoints every period]) "3ecac3fccee0, 1.2 s ago
// (every 2 s, 5 taken, 1 failed)".
std::string last_checkpoint_text(const ProcessRow& r) {
  std::string id = r.status.last_checkpoint.empty() ? "-" : r.status.last_checkpoint.substr(0, 12);
  if (r.every.empty()) return id;
  auto n = [&](const char* k) {
    auto it = r.every.find(k);
    return it == r.every.end() ? std::uint64_t{0} : std::strtoull(it->second.c_str(), nullptr, 10);
  };
  std::string t = id;
  if (r.every.contains("last_age_ms"))
    t += ", " + format_duration(std::chrono::milliseconds(n("last_age_ms"))) + " ago";
  t += " (every " + format_duration(std::chrono::milliseconds(n("every_ms"))) + ", " +
       std::to_string(n("count")) + " taken";
  if (auto tiers = r.every.find("tiers"); tiers != r.every.end()) t += ", in " + tiers->second;
  if (n("job_hosts")) t += ", a job of " + std::to_string(n("job_hosts")) + " hosts";
  if (n("failed")) t += ", " + std::to_string(n("failed")) + " failed";
  if (n("delayed")) t += ", " + std::to_string(n("delayed")) + " delayed";
  return t + ")";
}

void print_processes_json(const std::vector<ProcessRow>& rows) {
  JsonWriter j;
  j.begin_array();
  for (const ProcessRow& r : rows) {
    j.begin_object().field("pid", static_cast<std::int64_t>(r.pid)).field("command", r.command);
    if (!r.error.empty()) {
      j.field("error", r.error);
    } else if (!r.gcrd_state.empty()) {
      j.field("state", r.gcrd_state).field("checkpoint_phase", r.checkpoint_phase);
    } else {
      j.field("state", control::process_state_name(r.status.state))
          .field("regions", r.status.regions)
          .field("device_bytes", r.status.region_bytes)
          .field("requested_bytes", r.status.requested_bytes)
          .field("dirty_bytes", r.status.dirty_bytes)
          .field("epoch", r.status.epoch)
          .field("last_checkpoint", r.status.last_checkpoint)
          .field("conservative_tracking", r.status.conservative)
          .field("shared_regions", static_cast<std::uint64_t>(r.shares.size()));
      j.key("shares_with").begin_array();
      for (pid_t p : r.peers) j.value(static_cast<std::int64_t>(p));
      j.end_array();
    }
    if (!r.every.empty()) {  // Note [Checkpoints every period]
      j.key("every").begin_object();
      for (const auto& [k, v] : r.every) {
        const bool number = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
        if (number)
          j.field(k, static_cast<std::uint64_t>(std::strtoull(v.c_str(), nullptr, 10)));
        else
          j.field(k, v);
      }
      j.end_object();
    }
    j.end_object();
  }
  j.end_array();
  print(j.take());
}

void print_processes_table(const std::vector<ProcessRow>& rows) {
  Table t({{"PID", Table::Align::right},
           {"STATE"},
           {"DEVICE MEMORY", Table::Align::right},
           {"DIRTY", Table::Align::right},
           {"LAST CHECKPOINT"},
           {"SHARED"},
           {"COMMAND"}});
  for (const ProcessRow& r : rows) {
    if (!r.error.empty()) {
      t.add_row({std::to_string(r.pid), "?", "-", "-", "-", "-",
                 display_safe(r.command + "  (" + r.error + ")")});
      continue;
    }
    if (!r.gcrd_state.empty()) {  // its checkpoint is under way
      t.add_row({std::to_string(r.pid), r.gcrd_state, "-", "-",
                 "(" + r.checkpoint_phase + ")" +
                     (r.every.empty() ? std::string() : " " + last_checkpoint_text(r)),
                 "-", display_safe(r.command)});
      continue;
    }
    t.add_row({std::to_string(r.pid), control::process_state_name(r.status.state),
               format_bytes(r.status.region_bytes), format_bytes(r.status.dirty_bytes),
               last_checkpoint_text(r), shared_text(r), display_safe(r.command)});
  }
  print(t.render());
}

Status list_processes(bool json, Context& ctx) {
  std::vector<ProcessRow> rows = collect_process_rows();
  find_share_peers(rows);
  if (json) {
    print_processes_json(rows);
    return ok();
  }
  // What this host keeps of other hosts' checkpoints (gcr daemon --peer-memory).
  auto n = [](const char* k) { return std::strtoull(g_peer_memory[k].c_str(), nullptr, 10); };
  const std::string memory =
      g_peer_memory.empty()
          ? std::string()
          : "peer memory: " + std::to_string(n("copies")) + " copies of other hosts' job parts, " +
                format_bytes(n("used")) + " of " + format_bytes(n("budget")) + "\n";
  if (rows.empty()) {
    print("no processes are running under gcr (start one with 'gcr run -- PROGRAM')\n" + memory);
    return ok();
  }
  print_processes_table(rows);
  print(memory);
  return ok();
}

}  // namespace

void register_process_commands(CLI::App& app, Context& ctx) {
  auto* run = app.add_subcommand("run", "Run a program under gcr, so that it can be checkpointed");
  static RunOptions ro_storage;
  RunOptions* ro = &ro_storage;
  run->add_option("--track", ro->track,
                  "Write tracking: speculative (default; const pointers are reads), precise, "
                  "conservative (every launch writes everything), or validate (speculative, "
                  "checked after every launch: slow; names each kernel that wrote where its "
                  "parameters do not say)")
      ->type_name("MODE");
  run->add_option("--track-profile", ro->track_profile,
                  "Kernels to count as writing everything, one per line; --track validate "
                  "appends those it catches, so that later runs given the file are right")
      ->type_name("FILE");
  run->add_flag("--detach,-d", ro->detach,
                "Run in the background, in a session of its own, with stdout and stderr appended "
                "to a log file; print its pid")
      ->type_name("");
  run->add_option("--log", ro->log, "With --detach: the log file (default gcr-PID.log here)")
      ->type_name("FILE");
  run->add_option("--checkpoint-every", ro->every,
                  "Checkpoint the program live every DURATION (500ms, 30s, 5m, 1h): gcrd does, "
                  "incrementally, into the store, never two at once; 'gcr restore NAME' brings "
                  "back the newest")
      ->type_name("DURATION");
  run->add_option("--keep", ro->keep,
                  "With --checkpoint-every: how many to keep (default 3); older ones are removed "
                  "and their chunks freed")
      ->type_name("K");
  run->add_option("--checkpoint-name", ro->every_name,
                  "With --checkpoint-every: the name of the newest (default every-PID); each is "
                  "also NAME.N")
      ->type_name("NAME");
  run->add_option("command", ro->command, "The program and its arguments (after --)")->required();
  run->footer(
      "Examples:\n"
      "  gcr run -- ./train --epochs 3                   in the foreground (Ctrl-C, job control)\n"
      "  gcr run -- ./train > train.log 2>&1 &           a background job of your shell\n"
      "  pid=$(gcr run --detach --log train.log -- ./train)   detached, for long jobs\n"
      "The program runs with gcr's libcuda.so.1 preloaded; without an NVIDIA driver it runs on "
      "simgpu. gcr adds nothing to the program's stdout.\n"
      "In the foreground gcr becomes the program (exec): its exit status is the program's.");
  on_run(run, ctx, [ro, &ctx] { return run_program(*ro, ctx); });

  auto* preload = app.add_subcommand(
      "preload-path", "Print the path of gcr's libcuda.so.1, for LD_PRELOAD without gcr run");
  preload->footer(
      "Example (a PyTorch job, every process it starts included):\n"
      "  LD_PRELOAD=$(gcr preload-path) python train.py\n"
      "  LD_PRELOAD=$(gcr preload-path) torchrun --nproc-per-node 8 train.py\n"
      "The interposer finds the NVIDIA driver in the standard locations (else simgpu beside it);\n"
      "set GCR_REAL_LIBCUDA=/path/to/libcuda.so.1 for a driver elsewhere.");
  on_run(preload, ctx, []() -> Status {
    GCR_TRY_ASSIGN(auto interposer, interposer_path());
    print(interposer.string() + "\n");
    return ok();
  });

  auto* ps = app.add_subcommand("ps", "List the processes running under gcr");
  static bool json_storage = false;
  bool* json = &json_storage;
  ps->add_flag("--json", *json, "Machine-readable output");
  on_run(ps, ctx, [json, &ctx] { return list_processes(*json, ctx); });
}

}  // namespace gcr::cli
