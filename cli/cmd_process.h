// `gcr run` (start a program under gcr's interposer) and `gcr ps` (the processes running under
// gcr).
#pragma once

#include <CLI/CLI.hpp>

#include "context.h"

namespace gcr::cli {

void register_process_commands(CLI::App& app, Context& ctx);

}  // namespace gcr::cli
