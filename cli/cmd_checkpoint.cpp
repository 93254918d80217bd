// gcr checkpoint / restore / daemon. gcrd does the work (it holds the GPU and the parked memory);
// these commands find or start it, relay its progress, and print the summary.
#include "cmd_checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "gcr/unique_fd.h"
#include "gcrd_client.h"
#include "json.h"
#include "output.h"
#include "paths.h"

namespace gcr::cli {
namespace {

struct CheckpointOptions {
  std::vector<int> pids;
  std::string name;
  bool leave_running = false;
  bool stop_copy = false;
  bool json = false;
};

struct RestoreOptions {
  std::string name;
  int device = -1;
  bool eager = false;
  bool new_pid_namespace = false;
  bool json = false;
};

std::uint64_t field_u64(const std::map<std::string, std::string>& f, const std::string& k) {
  auto it = f.find(k);
  return it == f.end() ? 0 : std::strtoull(it->second.c_str(), nullptr, 10);
}

std::string field(const std::map<std::string, std::string>& f, const std::string& k) {
  auto it = f.find(k);
  return it == f.end() ? "" : it->second;
}

// Whether pid has a CUDA driver mapped (the NVIDIA driver, simgpu or gcr's interposer: each is a
// libcuda.so*); nullopt when its maps cannot be read (another user's process).
std::optional<bool> maps_libcuda(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/maps");
  bool any = false;
  for (std::string line; std::getline(in, line);) {
    any = true;
    auto slash = line.rfind('/');
    if (slash != std::string::npos && line.compare(slash + 1, 10, "libcuda.so") == 0) return true;
  }
  if (!any) return std::nullopt;
  return false;
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

Result<UniqueFd> gcrd_connection() {
  GCR_TRY_ASSIGN(auto driver, real_driver_path());
  GCR_TRY_ASSIGN(auto gcrd, gcrd_path());
  auto socket = gcrd::default_socket_path();
  GCR_TRY(check_socket_owner(socket));
  GCR_TRY_ASSIGN(int fd, gcrd::connect_or_start(socket, gcrd, gcrd_environment(driver)));
  return UniqueFd(fd);
}

std::chrono::nanoseconds ns(std::uint64_t v) {
  return std::chrono::nanoseconds(v);
}

void json_fields(JsonWriter& j, const std::map<std::string, std::string>& f) {
  for (const auto& [k, v] : f) {
    bool numeric =
        !v.empty() && v.find_first_not_of("0123456789") == std::string::npos && k != "id";
    if (numeric)
      j.field(k, static_cast<std::uint64_t>(std::strtoull(v.c_str(), nullptr, 10)));
    else
      j.field(k, v);
  }
}

Status checkpoint(const CheckpointOptions& o, Context& ctx) {
  if (o.pids.empty())
    return Error{Errc::invalid_argument, "no pid given: gcr checkpoint PID [PID...]"};
  std::string store = ctx.store_root().string();
  std::mutex mu;
  std::vector<Result<std::map<std::string, std::string>>> results(o.pids.size(),
                                                                  Error{Errc::internal, "not run"});
  std::vector<std::optional<bool>> cuda(o.pids.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < o.pids.size(); ++i) {
    threads.emplace_back([&, i] {
      cuda[i] = maps_libcuda(o.pids[i]);  // before: without --leave-running it is gone after
      auto conn = gcrd_connection();
      if (!conn) {
        results[i] = std::move(conn).error();
        return;
      }
      std::map<std::string, std::string> fields = {{"pid", std::to_string(o.pids[i])},
                                                   {"leave_running", o.leave_running ? "1" : "0"},
                                                   {"stop_copy", o.stop_copy ? "1" : "0"},
                                                   {"store", store}};
      if (!o.name.empty())
        fields["tag"] = o.pids.size() == 1 ? o.name : o.name + "-" + std::to_string(o.pids[i]);
      results[i] = gcrd::call(conn->get(), "checkpoint", fields, [&](const std::string& line) {
        if (o.json || !ctx.stderr_tty) return;
        std::lock_guard lock(mu);
        std::fprintf(stderr, "pid %d: %s\n", o.pids[i], line.c_str());
      });
    });
  }
  for (auto& t : threads) t.join();
  Error first_error{Errc::ok, {}};
  if (o.json) {
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
  } else {
    for (std::size_t i = 0; i < o.pids.size(); ++i) {
      if (!results[i]) continue;
      const auto& f = *results[i];
      std::string line = "checkpoint " + field(f, "id").substr(0, 12) + " of pid " +
                         field(f, "pid") + " (" + field(f, "kind") + "): stall " +
                         format_duration(ns(field_u64(f, "time.stall_ns"))) + ", total " +
                         format_duration(ns(field_u64(f, "time.total_ns"))) + "\n";
      bool baseline = field(f, "kind") == "stop-copy" && !o.stop_copy;
      if (baseline && cuda[i] == false)
        line += "  pid " + field(f, "pid") +
                " does not use CUDA: CRIU alone checkpointed it (no GPU state to save)\n";
      else if (baseline)
        line += "  pid " + field(f, "pid") +
                " is not running under gcr: checkpointed the --stop-copy way (the driver copied "
                "its device memory into CRIU's image)\n";
      else
        line += "  device memory " + format_bytes(field_u64(f, "region_bytes")) + " in " +
                field(f, "regions") + " regions, " + format_bytes(field_u64(f, "dirty_bytes")) +
                " changed since the last checkpoint\n";
      line +=
          "  stored " + format_bytes(field_u64(f, "stat.new_bytes")) + " new of " +
          format_bytes(field_u64(f, "stat.logical_bytes")) + " (zero " +
          format_bytes(field_u64(f, "stat.zero_bytes")) + ", deduplicated " +
          format_bytes(field_u64(f, "stat.dup_self_bytes") + field_u64(f, "stat.dup_parent_bytes") +
                       field_u64(f, "stat.dup_other_bytes")) +
          ")\n";
      if (field_u64(f, "cow_copies") || field_u64(f, "cow_waits"))
        line += "  while it was stored, the process copied " + field(f, "cow_copies") +
                " regions before writing them and waited for " + field(f, "cow_waits") + "\n";
      print(line);
      for (const auto& [k, v] : f)
        if (k.rfind("warning", 0) == 0) std::fprintf(stderr, "gcr: warning: %s\n", v.c_str());
    }
  }
  for (std::size_t i = 0; i < o.pids.size(); ++i)
    if (!results[i] && first_error.code == Errc::ok) {
      first_error = results[i].error();
      first_error.message =
          "checkpoint of pid " + std::to_string(o.pids[i]) + ": " + first_error.message;
    }
  if (first_error.code != Errc::ok) return first_error;
  return ok();
}

Status restore(const RestoreOptions& o, Context& ctx) {
  GCR_TRY_ASSIGN(UniqueFd conn, gcrd_connection());
  std::map<std::string, std::string> fields = {{"name", o.name},
                                               {"store", ctx.store_root().string()}};
  if (o.device >= 0) fields["device"] = std::to_string(o.device);
  if (o.eager) fields["eager"] = "1";
  if (o.new_pid_namespace) fields["new_pid_namespace"] = "1";
  GCR_TRY_ASSIGN(auto f, gcrd::call(conn.get(), "restore", fields, [&](const std::string& line) {
                   if (!o.json && ctx.stderr_tty) std::fprintf(stderr, "%s\n", line.c_str());
                 }));
  if (o.json) {
    JsonWriter j;
    j.begin_object();
    json_fields(j, f);
    j.end_object();
    print(j.take());
    return ok();
  }
  std::string where = field(f, "new_pid_namespace") == "1"
                          ? " (pid " + field(f, "original_pid") + " in a new PID namespace)"
                          : "";
  print("restored checkpoint " + field(f, "id").substr(0, 12) + " (" + field(f, "kind") +
        ") as pid " + field(f, "pid") + where + ": running after " +
        format_duration(ns(field_u64(f, "time.resume_ns"))) + ", all device memory after " +
        format_duration(ns(field_u64(f, "time.full_ns"))) + "\n  device memory " +
        format_bytes(field_u64(f, "region_bytes")) + " loaded " +
        (field(f, "mode") == "eager" ? "before the process ran" : "on demand") + " in " +
        format_duration(ns(field_u64(f, "time.load_ns"))) + " (" + field(f, "wanted_regions") +
        " regions waited for), CRIU restore " + format_duration(ns(field_u64(f, "time.criu_ns"))) +
        "\n");
  return ok();
}

Status daemon(Context&) {
  GCR_TRY_ASSIGN(auto driver, real_driver_path());
  GCR_TRY_ASSIGN(auto gcrd, gcrd_path());
  for (const auto& [k, v] : gcrd_environment(driver)) setenv(k.c_str(), v.c_str(), 1);
  std::string sock = gcrd::default_socket_path().string();
  std::string bin = gcrd.string();
  char* argv[] = {bin.data(), const_cast<char*>("--socket"), sock.data(), nullptr};
  execv(bin.c_str(), argv);
  return errno_error("cannot run " + bin);
}

}  // namespace

void register_checkpoint_commands(CLI::App& app, Context& ctx) {
  static CheckpointOptions co;
  auto* c = app.add_subcommand("checkpoint", "Checkpoint running processes into the image store");
  c->add_option("pid", co.pids, "Processes to checkpoint (concurrently)")->required();
  c->add_option("--name", co.name, "Tag the checkpoint (NAME-PID with several pids)")
      ->type_name("NAME");
  c->add_flag("--leave-running,-R", co.leave_running,
              "Keep the process running after the checkpoint");
  c->add_flag("--stop-copy", co.stop_copy,
              "The baseline: the driver copies device memory through host RAM into CRIU's image "
              "(cuda-checkpoint + CRIU)");
  c->add_flag("--json", co.json, "Machine-readable output");
  c->footer("Without --leave-running the process is gone once the checkpoint is committed.");
  on_run(c, ctx, [&ctx] { return checkpoint(co, ctx); });

  static RestoreOptions ro;
  auto* r = app.add_subcommand("restore", "Restore a checkpoint as a running process");
  r->add_option("name", ro.name, "Tag or id of the checkpoint")->required();
  r->add_option("--device", ro.device,
                "Restore onto this GPU (ordinal) instead of the original one")
      ->type_name("N");
  r->add_flag("--eager", ro.eager,
              "Load all device memory before the process runs (default: the process runs at once "
              "and waits only for memory it touches before it has arrived)");
  r->add_flag("--new-pid-namespace", ro.new_pid_namespace,
              "Restore into a PID namespace of its own (chosen anyway when the pid is in use)");
  r->add_flag("--json", ro.json, "Machine-readable output");
  r->footer(
      "The restored process gets its original pid: that pid must be free. The command "
      "returns once all device memory is loaded; the process may run well before that.");
  on_run(r, ctx, [&ctx] { return restore(ro, ctx); });

  auto* d = app.add_subcommand("daemon",
                               "Run gcrd in the foreground (gcr starts it on demand otherwise)");
  on_run(d, ctx, [&ctx] { return daemon(ctx); });
}

}  // namespace gcr::cli
