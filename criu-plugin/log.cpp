// log.h: one line per call, through CRIU's print_on_level when CRIU is the host.
#include "log.h"

#include <cstdarg>
#include <cstdio>

#include "criu_exports.h"

namespace gcr::criu_plugin {
namespace {

void vlog(unsigned level, const char* format, va_list args) {
  char text[1024];
  std::vsnprintf(text, sizeof text, format, args);
  const char* prefix = level == kLogError  ? "Error (gcr_criu_plugin): "
                       : level == kLogWarn ? "Warn  (gcr_criu_plugin): "
                                           : "gcr_criu_plugin: ";
  if (print_on_level)
    print_on_level(level, "%s%s\n", prefix, text);
  else if (level <= kLogWarn)
    std::fprintf(stderr, "%s%s\n", prefix, text);
}

}  // namespace

#define GCR_DEFINE_LOG(fn, level)    \
  void fn(const char* format, ...) { \
    va_list args;                    \
    va_start(args, format);          \
    vlog(level, format, args);       \
    va_end(args);                    \
  }
GCR_DEFINE_LOG(log_error, kLogError)
GCR_DEFINE_LOG(log_warn, kLogWarn)
GCR_DEFINE_LOG(log_info, kLogInfo)
GCR_DEFINE_LOG(log_debug, kLogDebug)
#undef GCR_DEFINE_LOG

}  // namespace gcr::criu_plugin
