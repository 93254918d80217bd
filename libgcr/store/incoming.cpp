// Arriving checkpoints: see incoming.h.
#include "store/incoming.h"

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <string>

#include "gcr/file.h"
#include "gcr/settings.h"
#include "gcr/unique_fd.h"
#include "store/gc_lock.h"
#include "store/store_state.h"

namespace gcr::store {
namespace {

std::filesystem::path incoming_dir(const Layout& layout) {
  return layout.root / "incoming";
}

// StoreOptions::arrival_idle, else GCR_ARRIVAL_IDLE_S (default 60 s).
std::chrono::seconds idle_limit(const StoreOptions& options) {
  return options.arrival_idle.count() > 0 ? options.arrival_idle : settings().arrival_idle;
}

bool path_exists(const std::filesystem::path& p) {
  return ::access(p.c_str(), F_OK) == 0;
}

std::filesystem::path owner_path(const Layout& layout, const CheckpointId& id) {
  return incoming_dir(layout) / (id.hex() + ".owner");
}

// "PID STARTTIME": a process, named so that a later one with the same pid is not taken for it.
std::string process_name(pid_t pid) {
  std::string stat;
  if (auto bytes = io::read_file("/proc/" + std::to_string(pid) + "/stat", 4096)) {
    stat.assign(reinterpret_cast<const char*>(bytes->data()), bytes->size());
  }
  auto close = stat.rfind(')');
  if (close == std::string::npos) return {};
  // Fields after the command: state is the 3rd of stat, starttime the 22nd.
  std::size_t field = 3, at = close + 1;  // at: the space before field `field`
  while (at < stat.size() && field < 22) {
    at = stat.find(' ', at + 1);
    if (at == std::string::npos) return {};
    ++field;
  }
  std::size_t end = stat.find(' ', at + 1);
  return std::to_string(pid) + " " + stat.substr(at + 1, end - at - 1);
}

// Whether the transfer that announced the checkpoint still runs (true when unknown).
bool owner_alive(const Layout& layout, const CheckpointId& id) {
  auto bytes = io::read_file(owner_path(layout, id), 256);
  if (!bytes) return true;
  std::string text(reinterpret_cast<const char*>(bytes->data()), bytes->size());
  pid_t pid = static_cast<pid_t>(std::atoll(text.c_str()));
  if (pid <= 0) return true;
  return process_name(pid) == text;
}

}  // namespace

std::filesystem::path incoming_manifest_path(const Layout& layout, const CheckpointId& id) {
  return incoming_dir(layout) / (id.hex() + ".manifest");
}

std::filesystem::path incoming_failed_path(const Layout& layout, const CheckpointId& id) {
  return incoming_dir(layout) / (id.hex() + ".failed");
}

Status announce_incoming(const Layout& layout, const CheckpointId& id,
                         std::span<const std::byte> manifest_bytes) {
  GCR_TRY(io::make_dir(incoming_dir(layout)));
  (void)io::remove_file(incoming_failed_path(layout, id));  // an earlier attempt's
  std::string owner = process_name(::getpid());
  GCR_TRY(io::write_file_durably(layout.tmp_file("owner"), owner_path(layout, id),
                                 std::as_bytes(std::span(owner.data(), owner.size()))));
  GCR_TRY(io::write_file_durably(layout.tmp_file("incoming"), incoming_manifest_path(layout, id),
                                 manifest_bytes));
  return io::sync_dir(incoming_dir(layout));
}

void incoming_failed(const Layout& layout, const CheckpointId& id, const std::string& message) {
  auto text = std::as_bytes(std::span(message.data(), message.size()));
  (void)io::write_file_durably(layout.tmp_file("failed"), incoming_failed_path(layout, id), text);
  (void)io::remove_file(incoming_manifest_path(layout, id));
  (void)io::remove_file(owner_path(layout, id));
}

void incoming_done(const Layout& layout, const CheckpointId& id) {
  (void)io::remove_file(incoming_manifest_path(layout, id));
  (void)io::remove_file(owner_path(layout, id));
  (void)io::remove_file(incoming_failed_path(layout, id));
}

Result<Manifest> load_incoming_manifest(const Layout& layout, const CheckpointId& id) {
  auto path = incoming_manifest_path(layout, id);
  auto bytes = io::read_file(path, kMaxManifestBytes);
  if (!bytes) {
    if (bytes.error().code == Errc::not_found) {
      return make_error(Errc::not_found, "checkpoint " + id.hex() +
                                             " is neither committed nor arriving in '" +
                                             layout.root.string() + "'");
    }
    return std::move(bytes).error();
  }
  std::string origin = id.hex() + " (" + path.string() + ")";
  GCR_TRY_ASSIGN(Manifest m, decode_manifest(*bytes, origin));
  if (m.id != id) {
    return make_error(Errc::corrupt_image,
                      "manifest " + origin + " holds checkpoint " + m.id.hex());
  }
  return m;
}

Status ArrivalWatch::await_chunk(StoreState& state, const CheckpointId& checkpoint,
                                 const ChunkId& chunk, const std::function<Result<bool>()>& found) {
  const Layout& layout = state.layout;
  // Under the shared lock, so that gc cannot delete a pack between the lookup and its open;
  // refreshed, the catalog has read the packs sealed since it last looked.
  auto look = [&](bool refresh) -> Result<bool> {
    GCR_TRY_ASSIGN(GcLock lock, GcLock::shared(layout.gc_lock()));
    if (refresh) GCR_TRY(state.catalog.refresh());
    return found();
  };
  // Usually the pack came with an earlier chunk's wait: no need to read packs/ again (and what
  // fails here, a pack gone since, is looked at again below with the catalog brought up to date).
  if (auto known = look(/*refresh=*/false); known && *known) return ok();
  const auto idle = idle_limit(state.options);
  auto last_arrival = std::chrono::steady_clock::now();
  std::size_t packs_seen = state.catalog.pack_count();
  std::string what = "checkpoint " + checkpoint.hex() + ": chunk " + chunk.hex();
  while (true) {
    GCR_TRY_ASSIGN(bool here, look(/*refresh=*/true));
    if (here) return ok();
    if (auto failed = io::read_file(incoming_failed_path(layout, checkpoint), 64 << 10)) {
      return make_error(
          Errc::io_error,
          what + ": the transfer bringing it failed: " +
              std::string(reinterpret_cast<const char*>(failed->data()), failed->size()));
    }
    if (!path_exists(incoming_manifest_path(layout, checkpoint)) ||
        !owner_alive(layout, checkpoint)) {
      // Committed since (then every chunk is sealed: one more look), or abandoned.
      bool committed = path_exists(layout.manifest(checkpoint));
      GCR_TRY_ASSIGN(bool last_look, look(/*refresh=*/true));
      if (last_look) return ok();
      return make_error(committed ? Errc::corrupt_image : Errc::io_error,
                        what + (committed ? " is in no sealed pack of the committed checkpoint; "
                                            "run 'gcr image verify'"
                                          : ": the transfer bringing it (gcr restore) ended "
                                            "before it came"));
    }
    std::size_t packs_now = state.catalog.pack_count();
    auto now = std::chrono::steady_clock::now();
    if (packs_now != packs_seen) {
      packs_seen = packs_now;
      last_arrival = now;
    } else if (now - last_arrival > idle) {
      return make_error(Errc::timeout, what + ": no pack arrived for " +
                                           std::to_string(idle.count()) +
                                           " s; is the transfer bringing it (gcr restore) still "
                                           "running?");
    }
    if (watch_.get() < 0) {
      // Made now, then looked again at once: a pack sealed before the watch is seen that way.
      watch_ = UniqueFd(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
      if (watch_.get() >= 0 &&
          ::inotify_add_watch(watch_.get(), layout.packs().c_str(), IN_CREATE | IN_MOVED_TO) < 0) {
        watch_ = UniqueFd();
      }
      if (watch_.get() >= 0) continue;
    }
    if (watch_.get() >= 0) {
      pollfd p{watch_.get(), POLLIN, 0};
      if (::poll(&p, 1, 100) > 0) {
        char buf[4096];
        while (::read(watch_.get(), buf, sizeof buf) > 0) {
        }
      }
    } else {
      ::usleep(5000);
    }
  }
}

}  // namespace gcr::store
