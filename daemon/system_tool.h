// Running the system's own tools (ip from iproute2) from gcrd: found where Debian installs them,
// run with nothing of gcrd's but the arguments, and their complaint kept for the error.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "gcr/result.h"

namespace gcr::gcrd {

// The first executable `name` in /usr/sbin, /sbin, /usr/bin or /bin.
std::optional<std::string> find_system_tool(const char* name);

// Runs argv (argv[0] a path) with stdin and stdout /dev/null and waits for it. An exit other than
// 0 is an error that quotes the command and the end of what it wrote to stderr.
Status run_system_tool(const std::vector<std::string>& argv);

}  // namespace gcr::gcrd
