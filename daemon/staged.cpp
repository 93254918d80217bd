// staged.h: one staged checkpoint's device memory, kept by gcrd between requests.
#include "staged.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "gcr/settings.h"
#include "loader.h"

namespace gcr::gcrd {
namespace {

struct StagedRegion {
  std::uint64_t address = 0, size = 0;
  int device = 0;
  std::vector<store::ChunkRef> chunks;
  MappedAllocation allocation;
};

using Clock = std::chrono::steady_clock;

std::mutex g_mu;
std::vector<StagedRegion> g_staged;  // guarded by g_mu
Clock::time_point g_staged_until;    // when what is staged goes, unless a restore takes it
std::condition_variable g_expiry;
bool g_expiry_running = false;

// GCR_STAGE_HOLD_S (default 600): how long staged memory waits for the restore of its migration.
std::chrono::seconds stage_hold() {
  return settings().stage_hold;
}

// Frees staged memory no restore took within stage_hold() (a migration given up, a source gone):
// a peer never keeps this GPU's memory for long (Note [Staged restore]).
void expire_staged() {
  std::unique_lock lock(g_mu);
  for (;;) {
    if (g_staged.empty()) {
      g_expiry.wait(lock);
      continue;
    }
    if (Clock::now() >= g_staged_until) {
      g_staged.clear();
      continue;
    }
    g_expiry.wait_until(lock, g_staged_until);
  }
}

// Caller holds g_mu.
void hold_for_a_while() {
  g_staged_until = Clock::now() + stage_hold();
  if (!g_expiry_running) {
    g_expiry_running = true;
    std::thread(expire_staged).detach();
  }
  g_expiry.notify_all();
}

std::vector<store::ChunkRef> chunks_of(const store::Manifest& m, const store::ObjectEntry& o) {
  if (o.first_chunk + o.chunk_count > m.chunks.size()) return {};
  return {m.chunks.begin() + static_cast<std::ptrdiff_t>(o.first_chunk),
          m.chunks.begin() + static_cast<std::ptrdiff_t>(o.first_chunk + o.chunk_count)};
}

bool same_contents(const std::vector<store::ChunkRef>& a, const std::vector<store::ChunkRef>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].id != b[i].id || a[i].raw_bytes != b[i].raw_bytes || a[i].zero != b[i].zero)
      return false;
  return true;
}

// Takes the staged region holding these contents (caller holds g_mu).
std::optional<MappedAllocation> take_locked(std::uint64_t address, std::uint64_t size, int device,
                                            const std::vector<store::ChunkRef>& chunks) {
  for (auto it = g_staged.begin(); it != g_staged.end(); ++it)
    if (it->address == address && it->size == size && it->device == device &&
        same_contents(it->chunks, chunks)) {
      MappedAllocation a = std::move(it->allocation);
      g_staged.erase(it);
      return a;
    }
  return std::nullopt;
}

}  // namespace

Result<std::uint64_t> stage_checkpoint(store::Store& store, const std::string& name,
                                       const Progress& progress) {
  GCR_TRY_ASSIGN(store::CheckpointId id, store.resolve(name));
  GCR_TRY_ASSIGN(auto reader, store.open_checkpoint(id, false));
  const store::Manifest m = reader->manifest();
  GCR_TRY_ASSIGN(Gpu * gpu, Gpu::get());
  std::vector<StagedRegion> next;
  std::vector<store::ObjectEntry> to_load;
  {
    std::lock_guard lock(g_mu);
    for (const auto& o : m.objects) {
      if (o.kind != store::ObjectKind::device_region) continue;
      StagedRegion r{o.address, o.size, static_cast<int>(o.device), chunks_of(m, o), {}};
      if (auto kept = take_locked(r.address, r.size, r.device, r.chunks)) {
        r.allocation = std::move(*kept);
      } else {
        GCR_TRY(gpu->use(r.device));
        GCR_TRY_ASSIGN(r.allocation, MappedAllocation::create(o.size, r.device));
        to_load.push_back(o);
      }
      next.push_back(std::move(r));
    }
    g_staged.clear();  // what the new round no longer has
  }
  std::vector<Loader::Item> items;
  std::uint64_t bytes = 0;
  for (const auto& o : to_load)
    for (auto& r : next)
      if (r.address == o.address && r.device == static_cast<int>(o.device)) {
        items.push_back({o, &r.allocation});
        bytes += o.size;
      }
  if (!items.empty()) {
    progress("staging " + std::to_string(bytes >> 20) + " MiB of checkpoint " +
             id.hex().substr(0, 12) + " on the GPU");
    GCR_TRY_ASSIGN(auto loader, Loader::start(std::move(reader), std::move(items), nullptr));
    GCR_TRY(loader->wait());
  }
  std::lock_guard lock(g_mu);
  g_staged = std::move(next);
  hold_for_a_while();
  return bytes;
}

std::optional<MappedAllocation> take_staged(const store::Manifest& m,
                                            const store::ObjectEntry& object, int device) {
  std::lock_guard lock(g_mu);
  return take_locked(object.address, object.size, device, chunks_of(m, object));
}

bool is_staged(const store::Manifest& m, const store::ObjectEntry& object, int device) {
  std::lock_guard lock(g_mu);
  auto chunks = chunks_of(m, object);
  for (const auto& r : g_staged)
    if (r.address == object.address && r.size == object.size && r.device == device &&
        same_contents(r.chunks, chunks))
      return true;
  return false;
}

void drop_staged() {
  std::lock_guard lock(g_mu);
  g_staged.clear();
}

}  // namespace gcr::gcrd
