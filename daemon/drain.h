// Storing a checkpoint's device memory: gcrd reads each region it holds (imported from the park)
// into host memory and hands it to the store. When the process already runs again
// (--leave-running), soft copy-on-write (Note [Soft copy-on-write] in gcr/cow_table.h) decides,
// region by region, whether gcrd reads the original or takes the copy the process made before
// writing it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gcr/control.h"
#include "gcr/result.h"
#include "gcr/store.h"
#include "held_memory.h"
#include "shared_table.h"

namespace gcr::gcrd {

// Regions up to this size are read whole into host memory, so that a process waiting to write one
// waits only for that read; larger ones are stored straight from the device a piece at a time.
inline constexpr std::uint64_t kStageWholeBytes = 1ull << 30;

struct DrainRegion {
  control::RegionRecord region;
  const HeldMemory* original;  // gcrd's import of the parked allocation
  std::string owner;           // the process it belongs to (CheckpointWriter::set_region_owner)
};

struct DrainStats {
  std::uint64_t read_original = 0;  // regions gcrd read from the original
  std::uint64_t took_copy = 0;      // regions the process copied before writing them
  std::uint64_t wanted = 0;         // regions the process waited for (it had no memory to copy)
};

// The process's copy of table entry `index` (of `size` bytes), once the entry is `copied`.
using TakeCopy =
    std::function<Result<std::unique_ptr<HeldMemory>>(std::uint32_t index, std::uint64_t size)>;

// Stores every region (in the store's order of arrival). With a table, the process is running:
// each entry is claimed before its original is read, or the process's copy is taken
// (`take_copy`); entries the process waits for go first. Without, the process is stopped and the
// originals are read in order. The table's first entries are the regions', in order (more may
// follow: Note [Shared memory behind every view]). `progress` gets the bytes done so far.
// `gone` (optional) says the process has exited: an entry it left `copying` is read from the
// original, which it never wrote (Note [Copies handed over] in gcr/cow_table.h).
Result<DrainStats> drain_regions(store::CheckpointWriter& writer,
                                 std::span<const DrainRegion> regions, const CowTable* table,
                                 const TakeCopy& take_copy,
                                 const std::function<void(std::uint64_t)>& progress,
                                 const std::function<bool()>& gone = {});

// Note [Shared memory behind every view]
// A job's shared allocation is mapped by several members (Note [Job checkpoint] in job.h), and
// once the job runs again any of them may write it: a kernel through its own view, or a
// communication kernel, which counts as writing every shared region (Note [Shared memory written
// job-wide] in interpose/regions.h). Under --leave-running each view is an entry of its member's
// soft copy-on-write table, set `reading` by gcrd before the member has the table: a member about
// to write the allocation waits until gcrd has read it, and no member copies it (a copy of one
// view would leave the other views writing the original). gcrd reads these first (one a member
// waits for before the rest), each once, then sets every view's entry done. The job is stalled for
// none of it, and no device memory is spent: the device copy made in the stall before needed the
// allocation's size spare on the GPU.
struct SharedDrain {
  DrainRegion stored;              // the view it is stored under
  std::vector<cow::Entry*> views;  // every view's entry, in its member's table
};

// Stores each shared allocation and releases its views; `wanted` counts the allocations a member
// was waiting for when gcrd released them. On an error the views stay `reading`: the caller's
// cow_end releases them.
Result<DrainStats> drain_shared(store::CheckpointWriter& writer,
                                std::span<const SharedDrain> shared,
                                const std::function<void(std::uint64_t)>& progress);

}  // namespace gcr::gcrd
