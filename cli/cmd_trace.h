// `gcr trace PID`: the kernel's timeline of a running process (its threads' scheduling, its waits
// at gcr's gate, the processes it starts) for a while, into a Chrome/Perfetto trace.
#pragma once

#include <CLI/CLI.hpp>

#include "context.h"

namespace gcr::cli {

void register_trace_command(CLI::App& app, Context& ctx);

}  // namespace gcr::cli
