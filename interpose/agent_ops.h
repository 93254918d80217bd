// What the control protocol can ask of the interposer (the agent thread, interpose/agent.cpp,
// serves the protocol of docs/protocol.md; the region manager implements these). Every op is
// called from the agent thread only, never concurrently with another op.
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

#include "gcr/control.h"
#include "gcr/result.h"

namespace gcr::interpose {

// The protocol's types (gcr/control.h) are the region manager's too: one definition of a region
// record, a parked region and a status, on the wire and in the interposer.
using control::CowCopy;
using control::kRegionDirty;
using control::ParkedRegion;
using control::ProcessState;
using control::RegionRecord;
using control::ShareRecord;
using control::StatusInfo;

// Closes the API gate (new calls wait), waits up to timeout_ms for calls inside to leave, then
// drains every stream of every context. On timeout the gate reopens and Errc::timeout is returned.
Status op_quiesce(unsigned timeout_ms);
// Reopens the gate. Valid when quiesced (not parked).
Status op_resume();
// Requires quiesced and no blockers. Exports every region as an fd, unmaps and releases it (and
// every real allocation handle: the driver then holds none of the program's memory); the state
// becomes parked. The region's virtual addresses stay reserved. A failure leaves everything mapped.
Result<std::vector<ParkedRegion>> op_park();
// Requires parked. Imports each fd and maps it at its recorded address with read-write access;
// the state becomes quiesced (resume reopens the gate). Fails without mapping anything unless
// every region of the park is given back.
Status op_unpark(std::vector<ParkedRegion> regions);
// Starts a new checkpoint epoch (dirty bits cleared) and records the checkpoint's id.
Status op_new_epoch(const std::string& checkpoint_id);
// Soft copy-on-write (interpose/cow.cpp, Note [Soft copy-on-write] in gcr/cow_table.h): begin
// after the unpark of a --leave-running checkpoint and before resume; take the copy of an entry in
// state `copied`; end (idempotent) frees copies not taken and forgets the table.
Status op_cow_begin(UniqueFd table, UniqueFd handover, std::uint32_t entries);
Result<CowCopy> op_cow_take(std::uint32_t index);
void op_cow_end();
// The addresses of the regions first touched since the last cut, in order (Note [First-touch
// order] in regions.h); regions freed since are left out.
std::vector<std::uint64_t> op_touch_order();
// A snapshot of the region table (regions with their dirty flags) and counters.
StatusInfo op_status();
std::vector<RegionRecord> op_regions();
// Why the process cannot be checkpointed now (Note [Virtual allocation handles]); op_park refuses
// for the same reasons.
std::vector<std::string> op_blockers();
// The regions shared with other processes, with their keys (Note [Shared regions]).
std::vector<ShareRecord> op_shares();
// Host memory the program pinned through the driver, which a device may write by DMA (protocol
// 1.4; alloc.cpp).
control::HostDmaRanges op_host_dma();

}  // namespace gcr::interpose
