// `gcr doctor`: what this machine supports and what is missing for gcr, each line with its fix.
#pragma once

#include <CLI/CLI.hpp>

#include "context.h"

namespace gcr::cli {

void register_doctor_command(CLI::App& app, Context& ctx);

}  // namespace gcr::cli
