// gcr trace PID: records until --duration has passed, the process ends, or Ctrl-C; then writes
// the trace and says what the kernel saw: the longest time a thread was held by gcr's gate or a
// checkpoint's freeze while it watched (a checkpoint someone else took, for example).
#include "cmd_trace.h"

#include <signal.h>
#include <time.h>

#include <chrono>
#include <cstdio>

#include "command_trace.h"
#include "gcr/human_output.h"
#include "gcr/json.h"

namespace gcr::cli {
namespace {

struct TraceOptions {
  int pid = 0;
  double duration_s = 10;
  std::string output;
  bool json = false;
};

bool alive(pid_t pid) {
  return ::kill(pid, 0) == 0 || errno == EPERM;
}

Status trace_process(const TraceOptions& o, Context& ctx) {
  if (o.pid <= 0 || !alive(o.pid))
    return Error{Errc::not_found, "no process " + std::to_string(o.pid) + " to trace"};
  if (o.duration_s <= 0) return Error{Errc::invalid_argument, "--duration must be positive"};
  std::string file = o.output.empty() ? "gcr-trace-" + std::to_string(o.pid) + ".json" : o.output;
  // Ctrl-C and SIGTERM end the recording, not gcr.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigprocmask(SIG_BLOCK, &stop, nullptr);
  CommandTrace trace = CommandTrace::begin(o.pid);
  if (!o.json && ctx.stderr_tty)
    std::fprintf(stderr, "tracing pid %d for %.1f s (Ctrl-C stops sooner)\n", o.pid, o.duration_s);
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.duration_s);
  while (std::chrono::steady_clock::now() < until && alive(o.pid)) {
    timespec tick{0, 100'000'000};
    if (sigtimedwait(&stop, nullptr, &tick) > 0) break;
  }
  GCR_TRY_ASSIGN(auto fields, trace.finish(file, nullptr));
  sigprocmask(SIG_UNBLOCK, &stop, nullptr);
  if (o.json) {
    JsonWriter j;
    j.begin_object().field("pid", static_cast<std::int64_t>(o.pid));
    json_fields(j, fields);
    j.end_object();
    print(j.take());
    return ok();
  }
  for (const auto& [k, v] : fields)
    if (k.rfind("trace.note.", 0) == 0) std::fprintf(stderr, "gcr: trace: %s\n", v.c_str());
  print("traced pid " + std::to_string(o.pid) + ": " + fields["trace.events"] + " events, " +
        fields["trace.threads"] + " threads\n" + describe_trace(fields));
  return ok();
}

}  // namespace

void register_trace_command(CLI::App& app, Context& ctx) {
  static TraceOptions o;
  auto* t = app.add_subcommand(
      "trace",
      "Record what the kernel sees of a running process (eBPF: every thread's scheduling, its "
      "waits at gcr's gate, the processes it starts) into a Chrome/Perfetto trace; needs root");
  t->add_option("pid", o.pid, "The process to watch")->required();
  t->add_option("--duration", o.duration_s, "Seconds to record (default 10; Ctrl-C stops sooner)")
      ->type_name("SECONDS");
  t->add_option("--output,-o", o.output, "The trace file (default gcr-trace-PID.json)")
      ->type_name("FILE");
  t->add_flag("--json", o.json, "Machine-readable output");
  on_run(t, ctx, [&ctx] { return trace_process(o, ctx); });
}

}  // namespace gcr::cli
