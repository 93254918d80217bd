// What the control channel can ask of the interposer (interpose/control.cpp serves the protocol of
// docs/protocol.md; the region manager implements these). Every op is called from the control
// thread only, never concurrently with another op.
//
// Note [Park before lock]
// The driver checkpoint lock blocks every driver call of the process, the interposer's own
// included: so all parking (export, unmap, release) happens before the lock and all unparking
// (import, map) after the unlock. Between op_park and op_unpark the interposer makes no driver
// call at all; its API gate keeps the application's calls out.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gcr/result.h"
#include "gcr/unique_fd.h"

namespace gcr::interpose {

enum class ProcessState : std::uint32_t { running = 0, quiesced = 1, parked = 2 };

// One region: a physical allocation mapped at [address, address + size) on `device`.
struct RegionRecord {
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  std::uint32_t device = 0;
  std::uint32_t flags = 0;  // kRegionDirty: written since the last checkpoint epoch
};
inline constexpr std::uint32_t kRegionDirty = 1u << 0;

struct ParkedRegion {
  RegionRecord region;
  UniqueFd fd;  // the allocation, exported as a POSIX file descriptor
};

struct StatusInfo {
  ProcessState state = ProcessState::running;
  std::uint64_t regions = 0;
  std::uint64_t region_bytes = 0;  // device memory held in regions
  std::uint64_t dirty_bytes = 0;   // in regions written since the last checkpoint epoch
  std::uint64_t requested_bytes =
      0;                        // what the program asked for (slab overhead = region - requested)
  std::uint64_t epoch = 0;      // checkpoint epoch; a checkpoint cut starts a new one
  std::string last_checkpoint;  // id of the last checkpoint taken, empty if none
  bool conservative = false;    // write tracking treats every launch as writing everything
};

// Closes the API gate (new calls wait), waits up to timeout_ms for calls inside to leave, then
// drains every stream of every context. On timeout the gate reopens and Errc::timeout is returned.
Status op_quiesce(unsigned timeout_ms);
// Reopens the gate. Valid when quiesced (not parked).
Status op_resume();
// Requires quiesced. Exports every region as an fd, unmaps and releases it; the state becomes
// parked. The region's virtual addresses stay reserved. A failure leaves everything mapped.
Result<std::vector<ParkedRegion>> op_park();
// Requires parked. Imports each fd and maps it at its recorded address with read-write access;
// the state becomes quiesced (resume reopens the gate). Fails without mapping anything unless
// every region of the park is given back.
Status op_unpark(std::vector<ParkedRegion> regions);
// Starts a new checkpoint epoch (dirty bits cleared) and records the checkpoint's id.
Status op_new_epoch(const std::string& checkpoint_id);
// A snapshot of the region table (regions with their dirty flags) and counters.
StatusInfo op_status();
std::vector<RegionRecord> op_regions();

}  // namespace gcr::interpose
