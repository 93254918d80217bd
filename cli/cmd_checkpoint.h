// `gcr checkpoint`, `gcr restore` and `gcr daemon`: the commands that talk to gcrd.
#pragma once

#include <CLI/CLI.hpp>

#include "context.h"

namespace gcr::cli {

void register_checkpoint_commands(CLI::App& app, Context& ctx);

}  // namespace gcr::cli
