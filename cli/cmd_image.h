// `gcr image ...`: list, inspect, verify, remove, collect and measure the checkpoints in the store.
#pragma once

#include <CLI/CLI.hpp>

#include "context.h"

namespace gcr::cli {

void register_image_commands(CLI::App& app, Context& ctx);
// push and pull (cmd_image_transfer.cpp), under `gcr image`.
void register_image_transfer_commands(CLI::App* image, Context& ctx);

}  // namespace gcr::cli
