// Logging into CRIU's log (print_on_level), or to stderr when the plugin runs outside CRIU.
// Each line is prefixed "gcr_criu_plugin: "; errors also "Error (gcr_criu_plugin): ", as pr_err.
#pragma once

namespace gcr::criu_plugin {

void log_error(const char* format, ...) __attribute__((__format__(__printf__, 1, 2)));
void log_warn(const char* format, ...) __attribute__((__format__(__printf__, 1, 2)));
void log_info(const char* format, ...) __attribute__((__format__(__printf__, 1, 2)));
void log_debug(const char* format, ...) __attribute__((__format__(__printf__, 1, 2)));

}  // namespace gcr::criu_plugin
