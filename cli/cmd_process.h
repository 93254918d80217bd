// `gcr run` (start a program under gcr's interposer) and `gcr ps` (the processes running under
// gcr).
#pragma once

#include <CLI/CLI.hpp>

#include <chrono>
#include <string>

#include "context.h"

namespace gcr::cli {

void register_process_commands(CLI::App& app, Context& ctx);

// "500ms", "2s", "1.5m", "1h" (a bare number: seconds), from 100 ms to 7 days; `option` names the
// flag in the error.
Result<std::chrono::milliseconds> parse_period(const std::string& text, const std::string& option);

}  // namespace gcr::cli
