// device_steps.h: the driver calls of each hook, around Note [Restore thread].
#include "device_steps.h"

#include <signal.h>
#include <sys/time.h>

#include <algorithm>
#include <chrono>

#include "log.h"
#include "restore_thread.h"

namespace gcr::criu_plugin {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string pid_text(int pid) {
  return "pid " + std::to_string(pid);
}

}  // namespace

const char* state_name(CUprocessState state) {
  switch (state) {
    case CU_PROCESS_STATE_RUNNING:
      return "RUNNING";
    case CU_PROCESS_STATE_LOCKED:
      return "LOCKED";
    case CU_PROCESS_STATE_CHECKPOINTED:
      return "CHECKPOINTED";
    case CU_PROCESS_STATE_FAILED:
      return "FAILED";
  }
  return "UNKNOWN";
}

DeviceSteps::Task* DeviceSteps::find(int pid) {
  auto it = std::find_if(tasks_.begin(), tasks_.end(), [&](const Task& t) { return t.pid == pid; });
  return it == tasks_.end() ? nullptr : &*it;
}

// CRIU arms alarm(--timeout) around seizing (seize.c); its handler gives up 5 s after firing. A
// lock that waits longer than the alarm has left would only be cut short by it.
unsigned DeviceSteps::lock_timeout_ms() const {
  unsigned ms = config_.lock_timeout_ms;
  itimerval left{};
  if (getitimer(ITIMER_REAL, &left) == 0 && (left.it_value.tv_sec || left.it_value.tv_usec)) {
    auto alarm_ms =
        static_cast<unsigned>(left.it_value.tv_sec * 1000 + left.it_value.tv_usec / 1000);
    alarm_ms = std::max(alarm_ms, 1u);  // 0 would mean "no timeout"
    if (ms == 0 || alarm_ms < ms) ms = alarm_ms;
  }
  return ms;
}

Result<Outcome> DeviceSteps::pause(int pid) {
  if (!driver_.restore_thread_id(pid)) {
    log_debug("%s is not a CUDA process: nothing to pause", pid_text(pid).c_str());
    return Outcome::not_mine;
  }
  GCR_TRY_ASSIGN(CUprocessState state, driver_.state(pid));
  switch (state) {
    case CU_PROCESS_STATE_RUNNING:
      break;
    case CU_PROCESS_STATE_LOCKED:
    case CU_PROCESS_STATE_CHECKPOINTED:
      log_info("%s is already %s: checkpointing it from there, and leaving it so",
               pid_text(pid).c_str(), state_name(state));
      tasks_.push_back({pid, state});
      return Outcome::done;
    default:
      return make_error(Errc::driver,
                        pid_text(pid) + "'s CUDA state is " + state_name(state) +
                            ": an earlier checkpoint or restore of it failed; it cannot be dumped");
  }
  unsigned timeout_ms = lock_timeout_ms();
  auto t0 = std::chrono::steady_clock::now();
  if (Status s = driver_.lock(pid, timeout_ms); !s) {
    // The driver leaves a task whose lock timed out RUNNING; make sure, as a lock cut short by
    // CRIU's alarm could otherwise leave it locked with nobody to unlock it.
    if (auto now = driver_.state(pid); now && *now == CU_PROCESS_STATE_LOCKED) {
      if (Status u = driver_.unlock(pid); !u) log_error("%s", u.error().message.c_str());
    }
    Error e = std::move(s).error();
    if (e.code == Errc::timeout)
      e.message += " (CUDA calls in flight did not finish within " + std::to_string(timeout_ms) +
                   " ms; raise GCR_LOCK_TIMEOUT_MS and criu --timeout)";
    e.message = "pausing CUDA in " + pid_text(pid) + ": " + e.message;
    return e;
  }
  tasks_.push_back({pid, CU_PROCESS_STATE_RUNNING});
  log_info("paused CUDA in %s (lock: %.1f ms, timeout %u ms)", pid_text(pid).c_str(), ms_since(t0),
           timeout_ms);
  return Outcome::done;
}

Result<Outcome> DeviceSteps::checkpoint(int pid) {
  Task* task = find(pid);
  if (!task) {
    if (driver_.restore_thread_id(pid))
      return make_error(Errc::busy,
                        pid_text(pid) +
                            " started using CUDA after CRIU paused devices (cuInit raced with "
                            "the dump); its GPU state cannot be dumped now: retry the dump");
    return Outcome::not_mine;
  }
  if (task->initial == CU_PROCESS_STATE_CHECKPOINTED) {
    log_info("%s was checkpointed before the dump: nothing to do", pid_text(pid).c_str());
    return Outcome::done;
  }
  GCR_TRY_ASSIGN(int tid, driver_.restore_thread_id(pid));
  auto t0 = std::chrono::steady_clock::now();
  GCR_TRY_ASSIGN(RestoreThreadRun run, RestoreThreadRun::start(tid));
  Status done = driver_.checkpoint(pid);
  Status stopped = run.stop();
  if (!done) return std::move(done).context("checkpointing CUDA in " + pid_text(pid)).error();
  if (!stopped)
    return std::move(stopped).context("after checkpointing CUDA in " + pid_text(pid)).error();
  log_info("checkpointed CUDA in %s (restore thread %d: %.1f ms)", pid_text(pid).c_str(), tid,
           ms_since(t0));
  return Outcome::done;
}

Result<std::vector<CUcheckpointGpuPair>> DeviceSteps::gpu_pairs() {
  if (pairs_) return *pairs_;
  std::vector<CUcheckpointGpuPair> pairs;
  for (const DevicePair& p : config_.device_map) {
    CUcheckpointGpuPair pair{};
    for (auto [ref, out] : {std::pair{&p.from, &pair.oldUuid}, std::pair{&p.to, &pair.newUuid}}) {
      if (ref->ordinal < 0) {
        *out = ref->uuid;
        continue;
      }
      auto uuid = driver_.device_uuid(ref->ordinal);
      if (!uuid) return std::move(uuid).context("GCR_DEVICE_MAP device " + ref->text).error();
      *out = *uuid;
    }
    log_info("GCR_DEVICE_MAP: %s (%s) -> %s (%s)", p.from.text.c_str(),
             format_uuid(pair.oldUuid).c_str(), p.to.text.c_str(),
             format_uuid(pair.newUuid).c_str());
    pairs.push_back(pair);
  }
  pairs_ = pairs;
  return pairs;
}

Result<Outcome> DeviceSteps::resume_restored(int pid) {
  auto tid = driver_.restore_thread_id(pid);
  if (!tid) {
    log_debug("%s is not a CUDA process: nothing to restore", pid_text(pid).c_str());
    return Outcome::not_mine;
  }
  auto t0 = std::chrono::steady_clock::now();
  auto attempt = [&]() -> Status {
    GCR_TRY_ASSIGN(CUprocessState state, driver_.state(pid));
    if (state == CU_PROCESS_STATE_RUNNING) {
      log_info("%s's CUDA state is RUNNING already", pid_text(pid).c_str());
      return ok();
    }
    if (state == CU_PROCESS_STATE_FAILED)
      return make_error(Errc::driver, "its CUDA state is FAILED");
    std::vector<CUcheckpointGpuPair> pairs;
    if (state == CU_PROCESS_STATE_CHECKPOINTED) {
      GCR_TRY_ASSIGN(pairs, gpu_pairs());
    }
    GCR_TRY_ASSIGN(RestoreThreadRun run, RestoreThreadRun::start(*tid));
    if (state == CU_PROCESS_STATE_CHECKPOINTED) {
      Status s = driver_.restore(pid, pairs);
      if (!s && !pairs.empty() && s.error().code == Errc::driver)
        return std::move(s)
            .context("GCR_DEVICE_MAP='" + config_.device_map_text +
                     "' must name every GPU the process used, each onto a GPU of the same kind "
                     "with enough free memory")
            .error();
      GCR_TRY(std::move(s));
    }
    GCR_TRY(driver_.unlock(pid));
    return run.stop();
  };
  if (Status s = attempt(); !s) {
    // CRIU goes on to resume the task whatever this hook returns (cr-restore.c); a task without
    // its GPU state would hang in its first CUDA call. Killing it makes CRIU's restore fail.
    kill(pid, SIGKILL);
    return make_error(s.error().code,
                      "restoring CUDA in " + pid_text(pid) + ": " + s.error().message +
                          "; killed it so that the restore fails rather than resuming it "
                          "without its GPU state");
  }
  log_info("restored CUDA in %s (restore thread %d: %.1f ms)", pid_text(pid).c_str(), *tid,
           ms_since(t0));
  return Outcome::done;
}

Status DeviceSteps::return_to(const Task& task) {
  GCR_TRY_ASSIGN(CUprocessState state, driver_.state(task.pid));
  if (state == task.initial) return ok();
  bool restore = state == CU_PROCESS_STATE_CHECKPOINTED;
  bool unlock = task.initial == CU_PROCESS_STATE_RUNNING &&
                (state == CU_PROCESS_STATE_LOCKED || state == CU_PROCESS_STATE_CHECKPOINTED);
  if (!restore && !unlock)
    return make_error(Errc::driver, std::string("CUDA state is ") + state_name(state) + ", was " +
                                        state_name(task.initial) +
                                        " before the dump; left as it is");
  GCR_TRY_ASSIGN(int tid, driver_.restore_thread_id(task.pid));
  GCR_TRY_ASSIGN(RestoreThreadRun run, RestoreThreadRun::start(tid));
  if (restore) GCR_TRY(driver_.restore(task.pid, {}));
  if (unlock) GCR_TRY(driver_.unlock(task.pid));
  GCR_TRY(run.stop());
  log_info("%s is back to %s (restore thread %d%s)", pid_text(task.pid).c_str(),
           state_name(task.initial), tid, run.traced() ? "" : ", not stopped by CRIU");
  return ok();
}

Status DeviceSteps::release_paused() {
  Status first;
  for (auto it = tasks_.rbegin(); it != tasks_.rend(); ++it) {
    if (Status s = return_to(*it); !s) {
      log_error("%s may hang in its next CUDA call: %s", pid_text(it->pid).c_str(),
                s.error().message.c_str());
      if (first) first = make_error(s.error().code, pid_text(it->pid) + ": " + s.error().message);
    }
  }
  tasks_.clear();
  return first;
}

}  // namespace gcr::criu_plugin
