// gcr's CRIU plugin: the hooks, and nothing else. Plain `criu dump` / `criu restore -L <dir>`
// (and runc, podman, Kubernetes through them) then checkpoint and restore a CUDA process's
// driver state themselves, as CRIU's own cuda plugin does, but by calling the driver's checkpoint
// API in-process (no cuda-checkpoint fork+exec per action, research §2).
//
// Each hook is a noexcept function that makes one call on DeviceSteps and turns its Result into
// CRIU's code in one place, to_errno(): 0 done, -ENOTSUP "not mine" (CRIU asks the next plugin),
// another negative errno for a failure (logged here, once). No exception crosses into CRIU.
//
// The plugin is disabled (every hook answers -ENOTSUP) for pre-dump, for a restore whose image
// it did not dump, and for a dump when no driver with the checkpoint API loads. A restore of an
// image it did dump fails at init when that driver is missing: better than resuming a process
// without its GPU state.
//
// For a process running under gcr, the plugin is a thin client of gcrd (gcrd_link.h; Note [CRIU
// run by someone else] in daemon/checkpoint.h): at the first PAUSE_DEVICES of a dump gcrd
// parks and stores the device memory of the whole tree, so the driver checkpoints control state
// only; at restore init gcrd allocates the memory and starts loading it before CRIU forks
// anything (earlier than POST_FORKING, which is not registered), and gives it to the restored
// process once CRIU is done. A CUDA process not under gcr gets the driver's checkpoint only.
#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <string_view>

#include <cstring>
#include <exception>
#include <optional>

extern "C" {
#include <criu/criu-plugin.h>
// Weak, as criu_exports.h: the plugin also loads where no CRIU defines it (tests).
__attribute__((weak)) int criu_get_image_dir(void);
}

#include "config.h"
#include "criu_exports.h"
#include "device_steps.h"
#include "driver.h"
#include "dump_root.h"
#include "final_state.h"
#include "gcrd_link.h"
#include "log.h"

namespace gcr::criu_plugin {
namespace {

constexpr char kPluginName[] = "gcr_criu_plugin";

// Set while enabled, from init to exit. CRIU calls every hook from its main thread.
std::optional<DeviceSteps> g_steps;
bool g_in_inventory = false;
// gcrd's part of this dump or restore (gcrd_link.h); asked once, at the first PAUSE_DEVICES.
std::optional<GcrdLink> g_gcrd;
bool g_gcrd_asked = false;

int images_dir() {
  return criu_get_image_dir ? criu_get_image_dir() : -1;
}

int to_errno(const Result<Outcome>& r) noexcept {
  if (r) return *r == Outcome::not_mine ? -ENOTSUP : 0;
  log_error("%s", r.error().message.c_str());
  switch (r.error().code) {  // never -ENOTSUP: a failure must not read as "not mine"
    case Errc::timeout:
      return -ETIMEDOUT;
    case Errc::permission_denied:
      return -EPERM;
    case Errc::out_of_memory:
      return -ENOMEM;
    case Errc::busy:
      return -EAGAIN;
    case Errc::invalid_argument:
      return -EINVAL;
    default:
      return -EIO;
  }
}

template <typename Fn>
Result<Outcome> guarded(const char* hook, Fn&& fn) noexcept {
  try {
    if (!g_steps) return Outcome::not_mine;
    return fn(*g_steps);
  } catch (const std::exception& e) {
    return make_error(Errc::internal, std::string(hook) + ": " + e.what());
  } catch (...) {
    return make_error(Errc::internal, std::string(hook) + ": unknown exception");
  }
}

// Says `say` on gcrd's socket `fd`, waits for its go ('g') and closes the socket: the time waited,
// or nothing when the socket ended without a go (gcrd gave up, or died).
std::optional<double> say_and_wait_for_go(int fd, char say) {
  timespec t0{}, t1{};
  clock_gettime(CLOCK_MONOTONIC, &t0);
  char go = 0;
  ssize_t n = -1;
  if (::send(fd, &say, 1, MSG_NOSIGNAL) == 1) {
    do n = ::read(fd, &go, 1);
    while (n < 0 && errno == EINTR);
  }
  ::close(fd);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (n != 1 || go != 'g') return std::nullopt;
  return (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
}

// Note [CRIU started before the cut] (gcr/criu.h): when gcrd started CRIU before it quiesced the
// process, the first PAUSE_DEVICES says ready and waits for gcrd's go. EOF (gcrd gave up, or
// died) fails the dump with nothing frozen yet.
Status wait_for_go() {
  static bool waited = false;
  const char* fd_text = std::getenv("GCR_DUMP_GO_FD");
  if (waited || !fd_text) return ok();
  waited = true;
  std::optional<double> ms = say_and_wait_for_go(std::atoi(fd_text), 'r');  // ready
  if (!ms)
    return Error{Errc::io_error,
                 "gcrd stopped the checkpoint before CRIU froze the process (it did not say go)"};
  log_info("gcrd said go after %.1f ms: the process is parked", *ms);
  return ok();
}

// Note [Lazy-pages daemon started beside the restore] (libgcr/criu/criu_run.cpp): gcrd started
// this restore beside the lazy-pages daemon, which must listen before CRIU connects to it, right
// after this init. EOF without a go (the daemon did not start, or gcrd died) fails the restore
// before CRIU has made any process.
Status wait_for_restore_go() {
  const char* fd_text = std::getenv("GCR_RESTORE_GO_FD");
  if (!fd_text) return ok();
  int fd = std::atoi(fd_text);
  ::unsetenv("GCR_RESTORE_GO_FD");  // once: nothing CRIU starts inherits the name
  struct stat st {};
  if (fd < 3 || ::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode))
    return Error{Errc::invalid_argument,
                 std::string("GCR_RESTORE_GO_FD=") + fd_text + " is no socket gcrd passed"};
  // 'w': gcrd then knows this plugin waits.
  std::optional<double> ms = say_and_wait_for_go(fd, 'w');
  if (!ms)
    return Error{Errc::io_error,
                 "gcrd stopped the restore before it began (its lazy-pages daemon did not start)"};
  log_info("gcrd said go after %.1f ms: the lazy-pages daemon listens", *ms);
  return ok();
}

Status enable(int stage) {
  if (stage == CR_PLUGIN_STAGE__PRE_DUMP) {
    log_info("disabled for pre-dump: device state is dumped only by a full dump");
    return ok();
  }
  if (stage == CR_PLUGIN_STAGE__RESTORE && check_and_remove_inventory_plugin &&
      !check_and_remove_inventory_plugin(kPluginName, sizeof kPluginName)) {
    log_info("disabled: the image was not dumped with %s", kPluginName);
    return ok();
  }
  GCR_TRY_ASSIGN(Config config,
                 load_config(stage == CR_PLUGIN_STAGE__DUMP ? Stage::dump : Stage::restore));
  if (!config.driver.empty() && !std::getenv("GCR_REAL_LIBCUDA"))
    ::setenv("GCR_REAL_LIBCUDA", config.driver.c_str(), 1);  // gcr.conf's, for Driver::load
  auto driver = Driver::load();
  if (!driver) {
    if (stage == CR_PLUGIN_STAGE__RESTORE)
      return make_error(driver.error().code, "the image holds CUDA state that only " +
                                                 std::string(kPluginName) +
                                                 " can restore, but: " + driver.error().message);
    log_info("disabled: %s", driver.error().message.c_str());
    return ok();
  }
  // With the cgroup freezer a frozen task's restore thread could not be run (Note [Restore
  // thread]); a tree without CUDA is seized as CRIU would without the plugin (Note [Seizing per
  // dump]).
  if (stage == CR_PLUGIN_STAGE__DUMP && set_compel_interrupt_only_mode) {
    std::optional<pid_t> root = dump_root();
    if (!root || tree_uses_cuda(*root))
      set_compel_interrupt_only_mode();
    else
      log_info("no process in the tree of %d maps a CUDA driver: CRIU seizes it its own way",
               *root);
  }
  log_info("enabled for %s with the driver %s%s%s",
           stage == CR_PLUGIN_STAGE__DUMP ? "dump" : "restore", driver->path().c_str(),
           config.file.empty() ? "" : ", settings from ", config.file.c_str());
  if (stage == CR_PLUGIN_STAGE__RESTORE) {
    // Before CRIU forks anything: gcrd down, or the memory not to be had, fails the restore here.
    GCR_TRY_ASSIGN(g_gcrd, GcrdLink::begin_restore(config, images_dir()));
  }
  g_steps.emplace(std::move(*driver), std::move(config));
  return ok();
}

}  // namespace
}  // namespace gcr::criu_plugin

using namespace gcr::criu_plugin;
using gcr::Result;

namespace {

int gcr_plugin_init(int stage) noexcept {
  try {
    g_steps.reset();
    g_in_inventory = false;
    g_gcrd.reset();
    g_gcrd_asked = false;
    if (stage == CR_PLUGIN_STAGE__RESTORE)
      if (gcr::Status go = wait_for_restore_go(); !go) {
        log_error("%s", go.error().message.c_str());
        return -1;
      }
    if (gcr::Status s = enable(stage); !s) {
      log_error("%s", s.error().message.c_str());
      return -1;
    }
    return 0;
  } catch (...) {
    log_error("init: unexpected exception");
    return -1;
  }
}

void gcr_plugin_exit(int stage, int ret) noexcept {
  try {
    if (g_steps && stage == CR_PLUGIN_STAGE__DUMP && g_steps->any_paused()) {
      FinalStateGuess guess = guess_final_state(g_steps->config().leave_running);
      if (ret != 0 || guess.state != FinalState::killed) {
        const char* why = ret != 0                          ? "the dump failed"
                          : guess.state == FinalState::kept ? "they keep running"
                                                            : "they may keep running";
        log_info("putting paused CUDA processes back (%s; %s)", why, guess.why.c_str());
        // GCR_PLUGIN_FAULT=skip-release plays a failure of this step, for gcr's tests: CRIU
        // still reports the dump a success, which is what the caller must not trust.
        const char* fault = std::getenv("GCR_PLUGIN_FAULT");
        if (fault && std::string_view(fault) == "skip-release")
          log_error("GCR_PLUGIN_FAULT=skip-release: leaving the paused processes as they are");
        else
          (void)g_steps->release_paused();  // each failure is logged
      } else {
        log_info("leaving CUDA processes checkpointed: CRIU kills them (%s)", guess.why.c_str());
      }
    }
    // gcrd learns the result last: after a failed dump it gives the parked memory back to
    // processes the driver steps above have just unlocked.
    if (g_gcrd)
      g_gcrd->finish(ret,
                     stage == CR_PLUGIN_STAGE__RESTORE && ret == 0 ? dump_root() : std::nullopt);
  } catch (...) {
    log_error("exit: unexpected exception; paused CUDA processes may hang");
  }
  g_gcrd.reset();
  g_steps.reset();
}

int gcr_plugin_pause_devices(int pid) noexcept {
  if (gcr::Status go = wait_for_go(); !go) return to_errno(go.error());
  Result<Outcome> r = guarded("PAUSE_DEVICES", [&](DeviceSteps& steps) -> Result<Outcome> {
    if (!g_gcrd_asked) {  // the root's: gcrd takes the whole tree, or none of it
      g_gcrd_asked = true;
      if (tree_uses_cuda(pid)) {
        GCR_TRY_ASSIGN(g_gcrd, GcrdLink::begin_dump(steps.config(), pid, images_dir()));
      }
    }
    GCR_TRY_ASSIGN(Outcome o, steps.pause(pid));
    // Restore then requires this plugin ("Missing required plugin" without it).
    if (o == Outcome::done && !g_in_inventory && add_inventory_plugin) {
      if (add_inventory_plugin(kPluginName) != 0)
        return make_error(gcr::Errc::internal, "cannot record the plugin in the inventory image");
      g_in_inventory = true;
    }
    return o;
  });
  return to_errno(r);
}
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__PAUSE_DEVICES, gcr_plugin_pause_devices)

int gcr_plugin_checkpoint_devices(int pid) noexcept {
  return to_errno(
      guarded("CHECKPOINT_DEVICES", [&](DeviceSteps& steps) { return steps.checkpoint(pid); }));
}
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__CHECKPOINT_DEVICES, gcr_plugin_checkpoint_devices)

// CRIU ignores this hook's failures (cr-restore.c logs them at debug level and resumes the tasks):
// resume_restored kills a task it cannot restore, which makes the restore fail.
int gcr_plugin_resume_devices_late(int pid) noexcept {
  return to_errno(guarded("RESUME_DEVICES_LATE", [&](DeviceSteps& steps) -> Result<Outcome> {
    GCR_TRY_ASSIGN(Outcome o, steps.resume_restored(pid));
    if (o == Outcome::done && g_gcrd) g_gcrd->restored(pid);
    return o;
  }));
}
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__RESUME_DEVICES_LATE, gcr_plugin_resume_devices_late)

}  // namespace

// The one exported symbol (exports.map). max_hooks is the CR_PLUGIN_HOOK__MAX of the header it
// is built against: a newer CRIU accepts it, an older one refuses it (plugin.c, verify_plugin).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored \
    "-Wmissing-field-initializers"  // hooks[]: set by the constructors above
extern "C" {
CR_PLUGIN_REGISTER(kPluginName, gcr_plugin_init, gcr_plugin_exit)
}
#pragma GCC diagnostic pop
