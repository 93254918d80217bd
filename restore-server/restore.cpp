// The restore protocol (restore.h).
#include "restore.h"

#include <signal.h>
#include <sys/mman.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <set>
#include <vector>

#include "device.h"
#include "gcr/control.h"
#include "pause_point.h"
#include "work_dir.h"

namespace gcr::gcrd {
using Clock = std::chrono::steady_clock;

namespace {
std::uint64_t ns_since(Clock::time_point t) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count());
}

// CRIU gives the process its original pid, and fails late and obscurely ("Can't fork for N:
// File exists") when that pid is taken: say so before anything is loaded.
Status check_pid_free(const store::Manifest& m, const std::string& id) {
  std::string text = m.meta_or("pid");
  long pid = text.empty() ? 0 : std::strtol(text.c_str(), nullptr, 10);
  if (pid <= 0) return ok();
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return ok();
  std::string cmd = process_cmdline(static_cast<pid_t>(pid));
  for (char& c : cmd)
    if (c == '\0') c = ' ';
  return Error{Errc::busy, "checkpoint " + id.substr(0, 12) + " restores as pid " + text +
                               ", which is in use" + (cmd.empty() ? "" : " by '" + cmd + "'") +
                               " (the original process, still running?); a restored process "
                               "gets its original pid: stop that process first"};
}

// Gives the restored process its device memory and lets it run.
Status unpark_restored(pid_t pid, const std::vector<control::RegionRecord>& records,
                       const std::vector<MappedAllocation>& allocations) {
  std::vector<control::ParkedRegion> regions;
  for (std::size_t i = 0; i < records.size(); ++i) {
    GCR_TRY_ASSIGN(UniqueFd fd, allocations[i].export_fd());
    regions.push_back({records[i], std::move(fd)});
  }
  GCR_TRY_ASSIGN(control::Client client, control::Client::connect(pid, std::chrono::seconds(10)));
  GCR_TRY(client.unpark(regions));
  GCR_TRY(client.resume());
  return client.close();
}
}  // namespace

Result<RestoreReport> restore_checkpoint(store::Store& store, const criu::Tools& tools,
                                         const RestoreRequest& req, const Progress& progress) {
  auto t0 = Clock::now();
  GCR_TRY_ASSIGN(store::CheckpointId id, store.resolve(req.name));
  GCR_TRY_ASSIGN(auto reader, store.open_checkpoint(id));
  const store::Manifest& m = reader->manifest();
  RestoreReport rep;
  rep.id = id.hex();
  rep.kind = m.meta_or("kind", "gcr");
  GCR_TRY(check_pid_free(m, rep.id));
  GCR_TRY_ASSIGN(Gpu * gpu, Gpu::get());
  if (req.device && (*req.device < 0 || *req.device >= gpu->device_count()))
    return Error{Errc::invalid_argument, "--device " + std::to_string(*req.device) +
                                             ": this machine has " +
                                             std::to_string(gpu->device_count()) + " GPU(s)"};

  // Device memory first: if it cannot be had, nothing has been started yet.
  std::vector<control::RegionRecord> records;
  std::vector<MappedAllocation> allocations;
  std::map<int, std::uint64_t> need;
  for (const auto& obj : m.objects)
    if (obj.kind == store::ObjectKind::device_region)
      need[req.device ? *req.device : static_cast<int>(obj.device)] += obj.size;
  for (const auto& [dev, bytes] : need) {
    if (dev >= gpu->device_count())
      return Error{Errc::invalid_argument,
                   "checkpoint " + rep.id.substr(0, 12) + " used GPU " + std::to_string(dev) +
                       ", which this machine does not have; pick one with --device"};
    if (bytes > gpu->free_bytes(dev))
      return Error{Errc::out_of_memory,
                   "checkpoint needs " + std::to_string(bytes >> 20) + " MiB on GPU " +
                       std::to_string(dev) + ", which has " +
                       std::to_string(gpu->free_bytes(dev) >> 20) +
                       " MiB free; free memory there or pick another with --device"};
  }
  auto tl = Clock::now();
  if (!need.empty())
    progress("loading " + std::to_string(m.objects.size()) + " objects of device memory");
  for (const auto& obj : m.objects) {
    if (obj.kind != store::ObjectKind::device_region) continue;
    int dev = req.device ? *req.device : static_cast<int>(obj.device);
    GCR_TRY(gpu->use(dev));
    GCR_TRY_ASSIGN(MappedAllocation a, MappedAllocation::create(obj.size, dev));
    void* p = mmap(nullptr, obj.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return Error{Errc::out_of_memory, "no host memory to stage a region"};
    std::span<std::byte> buf(static_cast<std::byte*>(p), obj.size);
    Status s = reader->read(obj, 0, buf);
    if (s) s = a.write(0, buf);
    munmap(p, obj.size);
    GCR_TRY(std::move(s));
    records.push_back({obj.address, obj.size, static_cast<std::uint32_t>(dev), 0});
    rep.region_bytes += obj.size;
    allocations.push_back(std::move(a));
  }
  rep.times_ns["load"] = ns_since(tl);

  auto tm = Clock::now();
  GCR_TRY_ASSIGN(WorkDir work, WorkDir::create("restore"));
  GCR_TRY(reader->materialize_files(work.path()));
  rep.times_ns["materialize"] = ns_since(tm);

  auto env = driver_env();
  if (req.device) {
    // The driver's restore needs a pair for every GPU the process used: those its regions were on
    // (device 0 when the image holds none, as a --stop-copy image does).
    std::set<int> used;
    for (const auto& obj : m.objects)
      if (obj.kind == store::ObjectKind::device_region) used.insert(static_cast<int>(obj.device));
    if (used.empty()) used.insert(0);
    if (used.size() > 1)
      return Error{Errc::unsupported, "checkpoint " + rep.id.substr(0, 12) + " used " +
                                          std::to_string(used.size()) +
                                          " GPUs; --device moves a single-GPU process only"};
    env["GCR_DEVICE_MAP"] = std::to_string(*used.begin()) + "=" + std::to_string(*req.device);
  }
  progress("restoring the process with CRIU");
  auto tc = Clock::now();
  pid_t pid = 0;
  GCR_TRY(criu::restore(tools, {work.path(), env, &pid}));
  rep.times_ns["criu"] = ns_since(tc);
  rep.pid = pid;
  pause_point("restored");

  if (!records.empty()) {
    auto tu = Clock::now();
    if (Status s = unpark_restored(pid, records, allocations); !s) {
      // Without its memory it would wait in its first CUDA call forever, holding its pid.
      if (pid > 0) kill(pid, SIGKILL);
      return std::move(s)
          .context("giving restored process " + std::to_string(pid) +
                   " its device memory (killed it: it cannot run without)")
          .error();
    }
    rep.times_ns["unpark"] = ns_since(tu);
  }
  rep.times_ns["total"] = ns_since(t0);
  return rep;
}

}  // namespace gcr::gcrd
