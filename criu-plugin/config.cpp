// config.h: the GCR_* environment and gcr.conf, read once.
#include "config.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "gcr/trusted_path.h"

namespace gcr::criu_plugin {
namespace {

struct Setting {
  const char* env;
  const char* key;
};
constexpr Setting kSettings[] = {
    {"GCR_REAL_LIBCUDA", "driver"},     {"GCR_LOCK_TIMEOUT_MS", "lock_timeout_ms"},
    {"GCR_DEVICE_MAP", "device_map"},   {"GCR_LEAVE_RUNNING", "leave_running"},
    {"GCR_GCRD_SOCKET", "gcrd_socket"}, {"GCR_STORE", "store"},
    {"GCR_CRIU_IMAGES", "criu_images"}, {"GCR_PLUGIN_GCRD", "gcrd"},
};

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t\r");
  auto e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

}  // namespace

std::filesystem::path config_file_path() {
  if (auto p = env_path_for_root("GCR_CONFIG")) return *p;  // it names a library CRIU loads
  return "/etc/gcr/gcr.conf";
}

Result<std::map<std::string, std::string>> parse_config_file(const std::string& text,
                                                             const std::string& where) {
  std::map<std::string, std::string> out;
  std::size_t line_no = 0, at = 0;
  while (at <= text.size()) {
    auto nl = text.find('\n', at);
    std::string line = text.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    at = nl == std::string::npos ? text.size() + 1 : nl + 1;
    ++line_no;
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    line = trim(line);
    if (line.empty()) continue;
    auto eq = line.find('=');
    std::string key = trim(line.substr(0, eq));
    bool known = false;
    for (const Setting& s : kSettings) known |= key == s.key;
    if (eq == std::string::npos || !known)
      return make_error(Errc::invalid_argument,
                        where + ":" + std::to_string(line_no) +
                            ": expected 'KEY = VALUE' with KEY " +
                            "one of driver, lock_timeout_ms, device_map, leave_running, " +
                            "gcrd_socket, store, criu_images, gcrd; got '" + line + "'");
    out[key] = trim(line.substr(eq + 1));
  }
  return out;
}

Result<Config> load_config(Stage stage) {
  Config c;
  std::map<std::string, std::string> file;
  const std::filesystem::path path = config_file_path();
  if (std::ifstream in(path); in) {
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    GCR_TRY_ASSIGN(file, parse_config_file(text, path.string()));
    c.file = path.string();
  }
  // The environment wins over the file; both spell one setting.
  auto get = [&](const char* env) -> std::string {
    if (const char* s = std::getenv(env); s && *s) return s;
    for (const Setting& s : kSettings)
      if (std::strcmp(s.env, env) == 0)
        if (auto it = file.find(s.key); it != file.end()) return it->second;
    return {};
  };
  auto named = [&](const char* env) {
    std::string from = std::getenv(env) ? std::string(env) : std::string();
    if (from.empty())
      for (const Setting& s : kSettings)
        if (std::strcmp(s.env, env) == 0) from = c.file + ": " + s.key;
    return from;
  };
  c.driver = get("GCR_REAL_LIBCUDA");
  c.gcrd_socket = get("GCR_GCRD_SOCKET");
  c.store = get("GCR_STORE");
  if (std::string g = get("GCR_PLUGIN_GCRD"); !g.empty()) {
    if (g != "on" && g != "off")
      return make_error(Errc::invalid_argument,
                        named("GCR_PLUGIN_GCRD") + "='" + g + "': expected on or off");
    c.use_gcrd = g == "on";
  }
  if (std::string i = get("GCR_CRIU_IMAGES"); !i.empty()) {
    if (i != "reference" && i != "self-contained")
      return make_error(Errc::invalid_argument, named("GCR_CRIU_IMAGES") + "='" + i +
                                                    "': expected reference or self-contained");
    c.self_contained = i == "self-contained";
  }
  if (stage == Stage::restore) {
    if (std::string s = get("GCR_DEVICE_MAP"); !s.empty()) {
      c.device_map_text = s;
      GCR_TRY_ASSIGN(c.device_map, parse_device_map(s));
    }
    return c;
  }
  if (std::string s = get("GCR_LOCK_TIMEOUT_MS"); !s.empty()) {
    char* end = nullptr;
    errno = 0;
    unsigned long v = std::strtoul(s.c_str(), &end, 10);
    if (errno || *end || v > 24ul * 3600 * 1000 || s[0] == '-')
      return make_error(Errc::invalid_argument, named("GCR_LOCK_TIMEOUT_MS") + "='" + s +
                                                    "': expected milliseconds (0: no timeout)");
    c.lock_timeout_ms = static_cast<unsigned>(v);
  }
  if (std::string s = get("GCR_LEAVE_RUNNING"); !s.empty()) {
    if (s == "1")
      c.leave_running = true;
    else if (s == "0")
      c.leave_running = false;
    else
      return make_error(Errc::invalid_argument,
                        named("GCR_LEAVE_RUNNING") + "='" + s + "': expected 1 or 0");
  }
  return c;
}

}  // namespace gcr::criu_plugin
