// Note [Staged restore]
// A migration's destination can have the device memory on its GPU before the process stops
// (`gcr migrate`, Note [Migration] in cli/cmd_migrate.cpp): after each pre-copy round the
// destination's gcrd is asked to stage that round's checkpoint — allocate its regions and load
// them, while the source still runs. It keeps one staged checkpoint; staging the next round reuses
// every region whose contents did not change (same address, size, device and chunk ids) and loads
// only the others. The final restore then takes each staged region whose contents are the
// checkpoint's instead of allocating and loading it, and waits only for the regions written since
// the last staged round: the downtime no longer carries the footprint's load. What no restore takes
// within GCR_STAGE_HOLD_S seconds of the last stage (default 600: a migration given up, a source
// gone) is freed, so that a peer cannot keep this GPU's memory.
#pragma once

#include <optional>
#include <string>

#include "checkpoint.h"
#include "device.h"
#include "gcr/store.h"

namespace gcr::gcrd {

// Stages checkpoint `name` of `store` (replacing what was staged). Returns the bytes it loaded.
Result<std::uint64_t> stage_checkpoint(store::Store& store, const std::string& name,
                                       const Progress& progress);

// The staged allocation holding exactly `object` of manifest `m` on `device`, taken out of the
// staged set; none if nothing staged matches.
std::optional<MappedAllocation> take_staged(const store::Manifest& m,
                                            const store::ObjectEntry& object, int device);

// Whether take_staged would find it (nothing is taken).
bool is_staged(const store::Manifest& m, const store::ObjectEntry& object, int device);

// Frees whatever is still staged (a restore has taken what it could).
void drop_staged();

}  // namespace gcr::gcrd
