// `gcr image ...`: list, inspect, verify, remove, collect and measure the checkpoints in the store.
#pragma once

#include <CLI/CLI.hpp>

#include "context.h"

namespace gcr::cli {

void register_image_commands(CLI::App& app, Context& ctx);

}  // namespace gcr::cli
