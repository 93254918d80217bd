// `gcr checkpoint`, `gcr restore` and `gcr daemon`: the commands that talk to gcrd.
#pragma once

#include <CLI/CLI.hpp>

#include "context.h"
#include "gcr/human_output.h"
#include "gcr/unique_fd.h"

namespace gcr::cli {

// A connection to this user's gcrd, started when none listens.
Result<UniqueFd> gcrd_connection();

// A progress line from gcrd: a `bytes` one moves the bar (true); before any other, which the
// caller prints, the bar is cleared.
bool draw_bytes_progress(ProgressLine& bar, const std::string& line);

void register_checkpoint_commands(CLI::App& app, Context& ctx);
// `gcr migrate` (cmd_migrate.cpp).
void register_migrate_command(CLI::App& app, Context& ctx);

}  // namespace gcr::cli
