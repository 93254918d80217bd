// Named pause points, for tests that kill gcr, gcrd or CRIU at a known phase of a request
// (tests/integration/failure). GCR_GCRD_PAUSE_AT=NAME[:SECONDS], parsed once into
// Settings::test_hooks (gcr/settings.h, which reports a NAME not in gcr::kGcrdPausePoints), makes
// gcrd log "gcrd: paused at NAME" to its stderr (gcrd.log) when it reaches point NAME, then sleep
// SECONDS (default 30) and go on. Without the variable a pause point costs one compare. A point
// added here is added to kGcrdPausePoints (gcr/test_hooks.h) too.
//
// Points, in the order a --leave-running checkpoint reaches them:
//   request    gcrd.cpp: a request is read, nothing is done yet (not ping or stage)
//   quiesced   checkpoint.cpp: the process is quiesced, not parked
//   parked     checkpoint.cpp: its memory is parked in gcrd; CRIU, started before the cut, waits
//              for gcrd's go (Note [CRIU started before the cut]; with GCR_CRIU_EARLY=0 it is
//              not started yet)
//   dumped     checkpoint.cpp: CRIU dumped it (and left it running), still parked
//   draining   checkpoint.cpp: it runs again, nothing stored yet
//   reply      gcrd.cpp: the request is done (a checkpoint committed), the answer not yet sent
// and of a restore:
//   lazy-pages restore.cpp: CRIU's lazy-pages daemon listens (Note [Host memory restored lazily]
//              in gcr/criu.h; without it, CRIU's restore is about to start)
//   restored   restore.cpp: CRIU restored the process, it waits for its device memory
//   load-table restore.cpp: (on demand) the process has the load table, is still parked
//   loading    restore.cpp: (on demand) it runs, loading goes on
//   host-pages host_pages.cpp: gcrd's server of the host memory (Note [Host memory from the
//              store]) got the lazy-pages daemon's first background request (CRIU is done); only
//              that thread pauses, and no page is served meanwhile
// and of a job across hosts' coordinator (Note [A job across hosts] in job_link.h):
//   job-committed  job_serve.cpp: the job's manifest is committed, no part is told yet
// and of a bystander of a moving rank (Note [A rank moved while its job runs] in job_move.h):
//   bystander-frozen  job_move.cpp: the stop holds this host's ranks still, before "frozen"
// and of a migration's destination:
//   stage      gcrd.cpp: a pre-copy round's stage request is read, nothing is loaded yet (the
//              source runs on, waiting for the answer)
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string_view>

#include "gcr/settings.h"

namespace gcr::gcrd {

inline void pause_point(std::string_view name) {
  const TestHooks& hooks = settings().test_hooks;
  if (hooks.gcrd_pause_at.empty() || name != hooks.gcrd_pause_at) return;
  const auto seconds = static_cast<unsigned>(hooks.gcrd_pause.count());
  std::fprintf(stderr, "gcrd: paused at %s for %u s (GCR_GCRD_PAUSE_AT)\n",
               hooks.gcrd_pause_at.c_str(), seconds);
  std::fflush(stderr);
  for (unsigned left = seconds; left > 0;) left = ::sleep(left);
  std::fprintf(stderr, "gcrd: going on after %s\n", hooks.gcrd_pause_at.c_str());
  std::fflush(stderr);
}

}  // namespace gcr::gcrd
