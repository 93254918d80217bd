// `gcr slurm ...`: what gcr's SPANK plugin runs inside a Slurm job (docs/slurm.md, Note [gcr
// under Slurm] in slurm/spank_gcr.cpp); users run none of it by hand.
#pragma once

#include <CLI/CLI.hpp>

#include "context.h"

namespace gcr::cli {

void register_slurm_commands(CLI::App& app, Context& ctx);

}  // namespace gcr::cli
