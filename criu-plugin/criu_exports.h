// What the criu binary exports to plugins, beyond criu-plugin.h, declared weak: a plugin built
// against one CRIU must still load into another (or into a test program with no CRIU at all),
// so each use checks for null. Signatures as in CRIU 4.2.1 (criu/include/image.h, log.h,
// seize.c).
#pragma once

#include <cstddef>

extern "C" {
// criu/include/log.h; levels below. Writes to CRIU's log (-o / -v).
__attribute__((weak)) void print_on_level(unsigned int loglevel, const char* format, ...)
    __attribute__((__format__(__printf__, 2, 3)));
// criu/image.c: records a plugin in the inventory image at dump; restore then refuses to run
// without it ("Missing required plugin").
__attribute__((weak)) int add_inventory_plugin(const char* name);
// criu/image.c: at restore, true when the inventory lists name (compared with strncmp over n
// bytes) or predates the plugins list; removes it from the list.
__attribute__((weak)) bool check_and_remove_inventory_plugin(const char* name, std::size_t n);
// criu/seize.c: seize with ptrace interrupts only, never the cgroup freezer (a frozen task's
// restore thread could not be run, Note [Restore thread]).
__attribute__((weak)) void set_compel_interrupt_only_mode(void);
}

namespace gcr::criu_plugin {
// criu/include/log.h
inline constexpr unsigned kLogError = 1;
inline constexpr unsigned kLogWarn = 2;
inline constexpr unsigned kLogInfo = 3;
inline constexpr unsigned kLogDebug = 4;
}  // namespace gcr::criu_plugin
