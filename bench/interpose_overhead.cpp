// bench_interpose: what gcr's interposer adds to a CUDA program's hot path, against the same
// program without it, measured in one run and printed as differences and ratios.
//
//   - per call: interpose_bench_probe (tests/interpose/bench_probe.cpp) times cuLaunchKernel of an
//     empty kernel, of a kernel with three parameters (a pointer write tracking must look up), and
//     cuMemcpyHtoDAsync of 4 bytes from pinned memory, `--iters` back-to-back calls per sample,
//     `--reps` samples. It runs twice per driver: directly (LD_LIBRARY_PATH) and under gcr
//     (LD_PRELOAD=the interposer, GCR_REAL_LIBCUDA=the driver). Two drivers:
//       null    bench/null_driver.cpp, whose calls return at once: the difference is the
//               interposer's own cost, alone. Goal: <= 100 ns added per launch and per async
//               copy (DESIGN.md §3: "tens of nanoseconds").
//       simgpu  the simulated GPU, whose launch queues to a worker thread (microseconds), so the
//               difference there is mostly noise; shown for scale.
//   - end to end: mlp_train (tests/workloads) steps per second, directly on simgpu and under gcr,
//     `--mlp-runs` runs each, alternating. Goal: <= 3% slower.
//
// Each figure is the best sample (the least disturbed by the rest of the machine); min / median /
// max are printed beside it and every sample is kept in the JSON, written to
// bench/results/interpose-<date>.json. Benchmarks print and record; they assert nothing about time.
// The exit status is non-zero only when a program fails or mlp_train's checksum differs under gcr.

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "gcr/json.h"

#ifndef GCR_BENCH_RESULTS_DIR
#define GCR_BENCH_RESULTS_DIR ""
#endif
#ifndef GCR_BENCH_BUILD_DIR
#define GCR_BENCH_BUILD_DIR ""
#endif

extern char** environ;

namespace fs = std::filesystem;
using gcr::JsonWriter;

namespace {

constexpr double kLaunchGoalNs = 100;  // per launch and per async copy (DESIGN.md §3: the hot path)
constexpr double kEndToEndGoal = 0.03;

// ---- running programs ---------------------------------------------------------------------------

struct Output {
  int status = -1;
  std::vector<std::string> lines;
  std::string error;  // why it could not start
  bool ok() const { return error.empty() && WIFEXITED(status) && WEXITSTATUS(status) == 0; }
  std::string describe() const {
    if (!error.empty()) return error;
    if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
    return "status " + std::to_string(status);
  }
};

// Runs argv with this process's environment less every LD_PRELOAD, LD_LIBRARY_PATH, GCR_* and
// SIMGPU_* entry, plus `env`; stdout captured, stderr passed through.
Output run(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  Output out;
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) {
    out.error = std::string("pipe: ") + std::strerror(errno);
    return out;
  }
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string s = *e;
    bool drop = false;
    for (const char* p : {"LD_PRELOAD=", "LD_LIBRARY_PATH=", "GCR_", "SIMGPU_"})
      drop = drop || s.rfind(p, 0) == 0;
    if (!drop) env_strings.push_back(s);
  }
  env_strings.insert(env_strings.end(), env.begin(), env.end());
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& a : argv_copy) args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipefd[1], 1);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(pipefd[1]);
  if (rc != 0) {
    close(pipefd[0]);
    out.error = "cannot run " + argv[0] + ": " + std::strerror(rc);
    return out;
  }
  std::string buf;
  char chunk[4096];
  for (;;) {
    ssize_t n = read(pipefd[0], chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buf.append(chunk, static_cast<std::size_t>(n));
  }
  close(pipefd[0]);
  while (waitpid(pid, &out.status, 0) < 0 && errno == EINTR) {
  }
  std::size_t pos = 0;
  while (pos < buf.size()) {
    std::size_t nl = buf.find('\n', pos);
    if (nl == std::string::npos) nl = buf.size();
    out.lines.push_back(buf.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return out;
}

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> w;
  std::size_t pos = 0;
  while (pos < line.size()) {
    std::size_t end = line.find(' ', pos);
    if (end == std::string::npos) end = line.size();
    if (end > pos) w.push_back(line.substr(pos, end - pos));
    pos = end + 1;
  }
  return w;
}

std::string dir_of(const std::string& path) {
  return path.substr(0, path.rfind('/'));
}

// ---- statistics ---------------------------------------------------------------------------------

double best_low(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::min_element(v.begin(), v.end());
}
double best_high(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

std::string fixed(double v, const char* fmt = "%.1f") {
  char buf[48];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string spread(const std::vector<double>& v) {
  if (v.empty()) return "-";
  return fixed(best_low(v)) + " / " + fixed(median(v)) + " / " + fixed(best_high(v));
}

// ---- the probe ----------------------------------------------------------------------------------

const char* const kCalls[] = {"launch_empty_ns", "launch_args_ns", "memcpy_async_ns"};
const char* const kCallNames[] = {"cuLaunchKernel, empty kernel", "cuLaunchKernel, 3 parameters",
                                  "cuMemcpyHtoDAsync, 4 B pinned"};

struct ProbeRun {
  std::map<std::string, std::vector<double>> samples;  // by kCalls name
  std::string libcuda;                                 // whose cuInit the probe called
};

struct DriverResult {
  std::string name, path;
  long iters = 0;
  ProbeRun direct, gcr;
};

std::optional<ProbeRun> parse_probe(const Output& o, const std::string& what) {
  if (!o.ok()) {
    std::fprintf(stderr, "bench_interpose: %s: %s\n", what.c_str(), o.describe().c_str());
    return std::nullopt;
  }
  ProbeRun r;
  for (const std::string& l : o.lines) {
    auto w = words(l);
    if (w.size() >= 2 && w[0] == "libcuda") r.libcuda = w[1];
    for (const char* c : kCalls)
      if (!w.empty() && w[0] == c)
        for (std::size_t i = 1; i < w.size(); ++i)
          r.samples[c].push_back(std::strtod(w[i].c_str(), nullptr));
  }
  return r;
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec);
}

// ---- mlp_train ----------------------------------------------------------------------------------

struct MlpRun {
  double steps_per_s = 0;
  std::string checksum;
};

// Steps per second between the first and the last printed step ("step N loss L t_ms T"), so that
// start-up (driver load, module load, allocation) is left out.
std::optional<MlpRun> parse_mlp(const Output& o, const std::string& what) {
  if (!o.ok()) {
    std::fprintf(stderr, "bench_interpose: %s: %s\n", what.c_str(), o.describe().c_str());
    return std::nullopt;
  }
  double first_step = -1, first_ms = 0, last_step = 0, last_ms = 0;
  MlpRun r;
  for (const std::string& l : o.lines) {
    auto w = words(l);
    if (w.size() >= 6 && w[0] == "step" && w[4] == "t_ms") {
      double step = std::strtod(w[1].c_str(), nullptr), ms = std::strtod(w[5].c_str(), nullptr);
      if (first_step < 0) {
        first_step = step;
        first_ms = ms;
      }
      last_step = step;
      last_ms = ms;
    }
    if (w.size() == 2 && w[0] == "checksum") r.checksum = w[1];
  }
  if (first_step < 0 || last_ms <= first_ms) {
    std::fprintf(stderr, "bench_interpose: %s printed no timed steps\n", what.c_str());
    return std::nullopt;
  }
  r.steps_per_s = (last_step - first_step) / ((last_ms - first_ms) / 1000.0);
  return r;
}

// ---- record -------------------------------------------------------------------------------------

std::string now_text(const char* fmt) {
  time_t t = ::time(nullptr);
  struct tm tm {};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, fmt, &tm);
  return buf;
}

double load_average() {
  double l = -1;
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &l) != 1) l = -1;
    std::fclose(f);
  }
  return l;
}

void json_samples(JsonWriter& j, const char* name, const std::vector<double>& v) {
  j.key(name).begin_array();
  for (double x : v) j.value(x);
  j.end_array();
}

}  // namespace

int main(int argc, char** argv) {
  std::string build = GCR_BENCH_BUILD_DIR, json_path;
  long iters = 200000, simgpu_iters = 20000;
  int reps = 5, mlp_runs = 5, mlp_steps = 300;
  bool no_results = false, skip_simgpu = false;
  CLI::App app{
      "bench_interpose: the interposer's added cost per CUDA call and end to end, against the same "
      "programs without it"};
  app.add_option("--build", build, "The build directory holding the programs")
      ->capture_default_str();
  app.add_option("--iters", iters, "Calls per sample on the null driver")->capture_default_str();
  app.add_option("--simgpu-iters", simgpu_iters, "Calls per sample on simgpu")
      ->capture_default_str();
  app.add_option("--reps", reps, "Samples per call and configuration")->capture_default_str();
  app.add_option("--mlp-runs", mlp_runs, "mlp_train runs with and without gcr (0: skip)")
      ->capture_default_str();
  app.add_option("--mlp-steps", mlp_steps, "Steps per mlp_train run")->capture_default_str();
  app.add_flag("--skip-simgpu", skip_simgpu, "Time the calls on the null driver only");
  app.add_option("--json", json_path, "Also write all numbers to this file");
  app.add_flag("--no-results", no_results, "Do not write bench/results/interpose-<date>.json");
  CLI11_PARSE(app, argc, argv);

  const std::string interposer = build + "/interpose/libcuda.so.1";
  const std::string simgpu = build + "/simgpu/libcuda.so.1";
  const std::string null_driver = build + "/bench/null-driver/libcuda.so.1";
  const std::string probe = build + "/tests/interpose/interpose_bench_probe";
  const std::string mlp = build + "/tests/workloads/mlp_train";
  for (const std::string& p : {interposer, simgpu, null_driver, probe, mlp})
    if (!fs::exists(p)) {
      std::fprintf(stderr,
                   "bench_interpose: %s is missing; build it (ninja -C %s bench_interpose) or pass "
                   "--build\n",
                   p.c_str(), build.c_str());
      return 2;
    }
  const std::vector<std::string> devices = {"SIMGPU_DEVICES=1", "SIMGPU_MEMORY=2G"};
  auto direct_env = [&](const std::string& driver) {
    std::vector<std::string> e = devices;
    e.push_back("LD_LIBRARY_PATH=" + dir_of(driver));
    return e;
  };
  auto gcr_env = [&](const std::string& driver) {
    std::vector<std::string> e = devices;
    e.push_back("LD_PRELOAD=" + interposer);
    e.push_back("GCR_REAL_LIBCUDA=" + driver);
    return e;
  };

  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const double load_before = load_average();
  std::printf("bench_interpose: what gcr's interposer adds per CUDA call and end to end\n");
  std::printf("  %s, %u CPUs, load average %.2f, %s\n\n", host, std::thread::hardware_concurrency(),
              load_before, now_text("%Y-%m-%d %H:%M").c_str());

  bool failed = false;
  std::vector<DriverResult> drivers;
  std::vector<std::pair<std::string, std::string>> driver_list = {{"null", null_driver}};
  if (!skip_simgpu) driver_list.push_back({"simgpu", simgpu});
  for (const auto& [name, path] : driver_list) {
    DriverResult d;
    d.name = name;
    d.path = path;
    d.iters = name == "null" ? iters : simgpu_iters;
    std::vector<std::string> argv = {probe, "--iters", std::to_string(d.iters), "--reps",
                                     std::to_string(reps)};
    auto direct = parse_probe(run(argv, direct_env(path)), "probe on " + name);
    auto gcr = parse_probe(run(argv, gcr_env(path)), "probe on " + name + " under gcr");
    if (!direct || !gcr) {
      failed = true;
      continue;
    }
    if (!same_file(direct->libcuda, path) || !same_file(gcr->libcuda, interposer)) {
      std::fprintf(
          stderr,
          "bench_interpose: the probe ran on %s directly and %s under gcr; expected %s and %s\n",
          direct->libcuda.c_str(), gcr->libcuda.c_str(), path.c_str(), interposer.c_str());
      failed = true;
      continue;
    }
    d.direct = *direct;
    d.gcr = *gcr;
    drivers.push_back(d);

    std::printf(
        "%s driver: ns per call, best of %d samples of %ld calls (min / median / max beside)\n",
        name.c_str(), reps, d.iters);
    std::printf("  %-30s %9s %9s %9s   %-22s %-22s %s\n", "call", "direct", "gcr", "added",
                "direct min/med/max", "gcr min/med/max", name == "null" ? "goal" : "");
    for (std::size_t i = 0; i < std::size(kCalls); ++i) {
      const auto& a = d.direct.samples[kCalls[i]];
      const auto& b = d.gcr.samples[kCalls[i]];
      double added = best_low(b) - best_low(a);
      std::string goal;
      if (name == "null")
        goal = "<= " + fixed(kLaunchGoalNs, "%.0f") +
               " ns added: " + (added <= kLaunchGoalNs ? "met" : "MISSED");
      std::printf("  %-30s %9.1f %9.1f %+9.1f   %-22s %-22s %s\n", kCallNames[i], best_low(a),
                  best_low(b), added, spread(a).c_str(), spread(b).c_str(), goal.c_str());
    }
    std::printf("\n");
  }

  // mlp_train, alternating so that drift of the machine hits both sides alike.
  std::vector<double> mlp_direct, mlp_gcr;
  std::string checksum_direct, checksum_gcr;
  bool checksums_equal = true;
  if (mlp_runs > 0) {
    std::vector<std::string> argv = {mlp, "--steps", std::to_string(mlp_steps), "--quiet"};
    for (int r = 0; r < mlp_runs; ++r) {
      auto a = parse_mlp(run(argv, direct_env(simgpu)), "mlp_train");
      auto b = parse_mlp(run(argv, gcr_env(simgpu)), "mlp_train under gcr");
      if (!a || !b) {
        failed = true;
        break;
      }
      mlp_direct.push_back(a->steps_per_s);
      mlp_gcr.push_back(b->steps_per_s);
      checksum_direct = a->checksum;
      checksum_gcr = b->checksum;
      checksums_equal = checksums_equal && a->checksum == b->checksum;
    }
  }
  double mlp_ratio = 0, mlp_slowdown = 0;
  if (!mlp_direct.empty()) {
    mlp_ratio = best_high(mlp_gcr) / best_high(mlp_direct);
    mlp_slowdown = 1 - mlp_ratio;
    std::printf(
        "mlp_train on simgpu, %d steps: steps per second, best of %zu runs (min / median / max "
        "beside)\n",
        mlp_steps, mlp_direct.size());
    std::printf("  direct %9.1f   (%s)\n", best_high(mlp_direct), spread(mlp_direct).c_str());
    std::printf("  gcr    %9.1f   (%s)\n", best_high(mlp_gcr), spread(mlp_gcr).c_str());
    std::printf("  gcr / direct %.3f: %s%.1f%%; goal <= %.0f%% slower: %s\n", mlp_ratio,
                mlp_slowdown >= 0 ? "-" : "+", std::abs(mlp_slowdown) * 100, kEndToEndGoal * 100,
                mlp_slowdown <= kEndToEndGoal ? "met" : "MISSED");
    std::printf(
        "  checksum %s%s\n", checksum_direct.c_str(),
        checksums_equal ? ", the same under gcr" : (" DIFFERS under gcr: " + checksum_gcr).c_str());
    if (!checksums_equal) failed = true;
  }

  // ---- record
  JsonWriter j;
  struct utsname un {};
  ::uname(&un);
  j.begin_object()
      .field("benchmark", "interpose_overhead")
      .field("date", now_text("%Y-%m-%dT%H:%M:%S%z"))
      .field("host", host)
      .field("kernel", std::string(un.sysname) + " " + un.release)
      .field("cpus", std::thread::hardware_concurrency())
      .field("load_average_before", load_before)
      .field("load_average_after", load_average())
      .field("reps", reps);
  j.key("drivers").begin_array();
  for (const DriverResult& d : drivers) {
    j.begin_object()
        .field("driver", d.name)
        .field("path", d.path)
        .field("calls_per_sample", static_cast<std::int64_t>(d.iters));
    j.key("calls").begin_array();
    for (const char* c : kCalls) {
      auto a = d.direct.samples.at(c), b = d.gcr.samples.at(c);
      j.begin_object()
          .field("call", c)
          .field("direct_best_ns", best_low(a))
          .field("gcr_best_ns", best_low(b))
          .field("added_ns", best_low(b) - best_low(a))
          .field("direct_median_ns", median(a))
          .field("gcr_median_ns", median(b));
      json_samples(j, "direct_samples_ns", a);
      json_samples(j, "gcr_samples_ns", b);
      j.end_object();
    }
    j.end_array().end_object();
  }
  j.end_array();
  j.key("mlp_train")
      .begin_object()
      .field("steps", mlp_steps)
      .field("runs", static_cast<std::int64_t>(mlp_direct.size()));
  j.field("direct_best_steps_per_s", best_high(mlp_direct))
      .field("gcr_best_steps_per_s", best_high(mlp_gcr))
      .field("gcr_vs_direct", mlp_ratio)
      .field("checksums_equal", checksums_equal);
  json_samples(j, "direct_steps_per_s", mlp_direct);
  json_samples(j, "gcr_steps_per_s", mlp_gcr);
  j.end_object();
  j.key("goals").begin_object().field("added_ns_per_call_max", kLaunchGoalNs);
  for (const DriverResult& d : drivers)
    if (d.name == "null") {
      double added = 0;
      for (const char* c : kCalls)
        added = std::max(added, best_low(d.gcr.samples.at(c)) - best_low(d.direct.samples.at(c)));
      j.field("added_ns_per_call_worst", added).field("per_call_met", added <= kLaunchGoalNs);
    }
  j.field("end_to_end_slowdown_max", kEndToEndGoal);
  if (!mlp_direct.empty())
    j.field("end_to_end_slowdown", mlp_slowdown)
        .field("end_to_end_met", mlp_slowdown <= kEndToEndGoal);
  j.end_object();
  j.end_object();
  std::string doc = j.take();

  auto write_doc = [&](const fs::path& path) {
    std::ofstream f(path);
    f << doc;
    f.close();
    if (!f) {
      std::fprintf(stderr, "bench_interpose: could not write %s\n", path.c_str());
      return;
    }
    std::printf("wrote %s\n", path.c_str());
  };
  if (!json_path.empty()) write_doc(json_path);
  if (!no_results && std::strlen(GCR_BENCH_RESULTS_DIR) > 0) {
    fs::path dir = GCR_BENCH_RESULTS_DIR;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec)
      std::fprintf(stderr, "bench_interpose: could not create %s: %s\n", dir.c_str(),
                   ec.message().c_str());
    else
      write_doc(dir / ("interpose-" + now_text("%Y-%m-%dT%H%M%S") + ".json"));
  }
  return failed ? 1 : 0;
}
