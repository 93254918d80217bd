// Note [Leave running] (final_state.h).
#include "final_state.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace gcr::criu_plugin {
namespace {

bool is_keep_option(const std::string& word) {
  return word == "-R" || word == "--leave-running" || word == "-s" || word == "--leave-stopped";
}

// CRIU's configuration files hold one option per line, with or without the leading "--".
bool config_keeps(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string first;
    if (!(words >> first) || first[0] == '#') continue;
    if (first.rfind("--", 0) != 0) first = "--" + first;
    if (is_keep_option(first)) return true;
  }
  return false;
}

}  // namespace

FinalStateGuess guess_final_state(std::optional<bool> leave_running_env,
                                  const std::vector<std::string>& argv, const std::string& home,
                                  const std::string& env_config) {
  if (leave_running_env)
    return {*leave_running_env ? FinalState::kept : FinalState::killed,
            std::string("GCR_LEAVE_RUNNING=") + (*leave_running_env ? "1" : "0")};
  // Over RPC CRIU retitles itself ("criu: dump --rpc -t PID", one string: cr-service.c).
  bool rpc = argv.size() < 2 || argv[1] == "swrk" || argv[1] == "service";
  for (const std::string& a : argv) rpc |= a.find("--rpc") != std::string::npos;
  if (rpc)
    return {FinalState::unknown,
            "criu runs over RPC, which does not show --leave-running to plugins"};
  bool default_configs = true;
  std::vector<std::string> configs;
  for (std::size_t i = 1; i < argv.size(); ++i) {
    if (is_keep_option(argv[i])) return {FinalState::kept, argv[i] + " on criu's command line"};
    if (argv[i] == "--no-default-config") default_configs = false;
    if (argv[i] == "--config" && i + 1 < argv.size()) {
      configs.push_back(argv[i + 1]);
      default_configs = false;
    }
    if (argv[i].rfind("--config=", 0) == 0) {
      configs.push_back(argv[i].substr(9));
      default_configs = false;
    }
  }
  if (!env_config.empty()) configs.push_back(env_config);
  if (default_configs) {
    configs.push_back("/etc/criu/default.conf");
    if (!home.empty()) configs.push_back(home + "/.criu/default.conf");
  }
  for (const std::string& path : configs)
    if (config_keeps(path)) return {FinalState::kept, "leave-running/leave-stopped in " + path};
  return {FinalState::killed, "neither --leave-running nor --leave-stopped given"};
}

FinalStateGuess guess_final_state(std::optional<bool> leave_running_env) {
  std::vector<std::string> argv;
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string arg;
  while (std::getline(in, arg, '\0')) argv.push_back(arg);
  const char* home = std::getenv("HOME");
  const char* env_config = std::getenv("CRIU_CONFIG_FILE");
  return guess_final_state(leave_running_env, argv, home ? home : "", env_config ? env_config : "");
}

}  // namespace gcr::criu_plugin
