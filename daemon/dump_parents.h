// The previous live dump's images of each process whose host memory CRIU tracks itself
// (--track-mem, on a CRIU without cow-track and a kernel with soft-dirty bits; Note [Incremental
// dumps made whole] in gcr/criu_pagemap.h), kept by gcrd as the next dump's parent.
//
// A parent is taken out for a dump and kept again only once that dump is whole and stored: a
// dump that fails leaves none, so that the next one is full (its soft-dirty bits may have been
// cleared by the failed one). What is not seen: another program clearing the process's soft-dirty
// bits between two checkpoints (a CRIU pre-dump of the user's, the program writing clear_refs)
// makes pages written before that read as unchanged; GCR_CRIU_TRACK_MEM=0 turns this off.
#pragma once

#include <optional>

#include "lineage.h"
#include "work_dir.h"

namespace gcr::gcrd {

class DumpParents {
 public:
  static DumpParents& instance();
  // The images the next dump of `key` starts from, taken out; none for its first.
  std::optional<WorkDir> take(const ProcessKey& key);
  // A dump of `key` made whole and stored: its images are the next dump's parent. Those of
  // processes that have ended go.
  void keep(const ProcessKey& key, WorkDir images);

 private:
  DumpParents() = default;
  struct State;
  State& state();
};

}  // namespace gcr::gcrd
