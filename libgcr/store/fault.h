// Named crash and pause points (STYLE.md §2, after CRIU's fault-injection.h): GCR_FAULT=<name>
// (Settings::test_hooks, gcr/settings.h) makes the process _exit(86) at that step, so tests can
// kill the store at every step of a commit or a gc and check that nothing committed is lost. The
// points are gcr::store::Fault (gcr/test_hooks.h).
#pragma once

#include <string_view>

#include "gcr/test_hooks.h"  // enum class Fault

namespace gcr::store {

inline constexpr int kFaultExitCode = 86;

std::string_view fault_name(Fault f);

// _exit(kFaultExitCode) when GCR_FAULT names f; nothing otherwise. Cheap: one compare.
void fault_point(Fault f);

// For race tests: when GCR_PAUSE names f, creates the file GCR_PAUSE_FILE and waits until the test
// removes it (at most 120 s), so that another process can act at exactly this step.
void pause_point(Fault f);

}  // namespace gcr::store
