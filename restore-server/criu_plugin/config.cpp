// config.h: the GCR_* environment, read once.
#include "config.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace gcr::criu_plugin {

Result<Config> load_config(Stage stage) {
  Config c;
  if (stage == Stage::restore) {
    if (const char* s = std::getenv("GCR_DEVICE_MAP"); s && *s) {
      c.device_map_text = s;
      GCR_TRY_ASSIGN(c.device_map, parse_device_map(s));
    }
    return c;
  }
  if (const char* s = std::getenv("GCR_LOCK_TIMEOUT_MS"); s && *s) {
    char* end = nullptr;
    errno = 0;
    unsigned long v = std::strtoul(s, &end, 10);
    if (errno || *end || v > 24ul * 3600 * 1000 || s[0] == '-')
      return make_error(Errc::invalid_argument, std::string("GCR_LOCK_TIMEOUT_MS='") + s +
                                                    "': expected milliseconds (0: no timeout)");
    c.lock_timeout_ms = static_cast<unsigned>(v);
  }
  if (const char* s = std::getenv("GCR_LEAVE_RUNNING"); s && *s) {
    if (std::strcmp(s, "1") == 0)
      c.leave_running = true;
    else if (std::strcmp(s, "0") == 0)
      c.leave_running = false;
    else
      return make_error(Errc::invalid_argument,
                        std::string("GCR_LEAVE_RUNNING='") + s + "': expected 1 or 0");
  }
  return c;
}

}  // namespace gcr::criu_plugin
