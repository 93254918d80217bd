// Named pause points, for tests that kill gcr, gcrd or CRIU at a known phase of a request
// (tests/integration/failure). GCR_GCRD_PAUSE_AT=NAME[:SECONDS], read once, makes gcrd log
// "gcrd: paused at NAME" to its stderr (gcrd.log) when it reaches point NAME, then sleep SECONDS
// (default 30) and go on. Without the variable a pause point costs one compare.
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
// and of a migration's destination:
//   stage      gcrd.cpp: a pre-copy round's stage request is read, nothing is loaded yet (the
//              source runs on, waiting for the answer)
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace gcr::gcrd {

inline void pause_point(std::string_view name) {
  struct Spec {
    std::string name;
    unsigned seconds = 30;
  };
  static const Spec spec = [] {
    Spec s;
    const char* v = std::getenv("GCR_GCRD_PAUSE_AT");
    if (!v || !*v) return s;
    std::string text = v;
    auto colon = text.find(':');
    s.name = text.substr(0, colon);
    if (colon != std::string::npos)
      s.seconds = static_cast<unsigned>(std::strtoul(text.c_str() + colon + 1, nullptr, 10));
    return s;
  }();
  if (spec.name.empty() || name != spec.name) return;
  std::fprintf(stderr, "gcrd: paused at %s for %u s (GCR_GCRD_PAUSE_AT)\n", spec.name.c_str(),
               spec.seconds);
  std::fflush(stderr);
  for (unsigned left = spec.seconds; left > 0;) left = ::sleep(left);
  std::fprintf(stderr, "gcrd: going on after %s\n", spec.name.c_str());
  std::fflush(stderr);
}

}  // namespace gcr::gcrd
