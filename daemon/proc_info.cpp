// proc_info.h.
#include "proc_info.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace gcr::gcrd {

uid_t process_owner(pid_t pid) {
  struct stat st {};
  std::string p = "/proc/" + std::to_string(pid);
  return ::stat(p.c_str(), &st) == 0 ? st.st_uid : static_cast<uid_t>(-1);
}

std::string process_cmdline(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

TraceState trace_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  if (!in) return TraceState::gone;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("State:", 0) == 0 && line.find('Z') != std::string::npos)
      return TraceState::gone;
    if (line.rfind("TracerPid:", 0) == 0)
      return std::atoi(line.c_str() + 10) == 0 ? TraceState::running : TraceState::traced;
  }
  return TraceState::gone;
}

}  // namespace gcr::gcrd
