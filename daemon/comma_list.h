// Lists written "a,b,c" in requests and META lines: a job's pids (job_pids, remote_pids.N, the
// pids of META job_parts) and the holders of META peer_copies.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace gcr::gcrd {

// The items between the commas, empty ones left out.
inline std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    if (comma > at) out.push_back(text.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

inline std::string pid_list(const std::vector<pid_t>& pids) {  // "1,2,3"
  std::string out;
  for (pid_t p : pids) out += (out.empty() ? "" : ",") + std::to_string(p);
  return out;
}

// "1,2,3" as pids; nothing when an item is not a positive number, or there is none.
inline std::optional<std::vector<pid_t>> parse_pid_list(const std::string& text) {
  std::vector<pid_t> out;
  for (const std::string& item : split_commas(text)) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (v <= 0 || *end != '\0' || v > 0x7fffffff) return std::nullopt;
    out.push_back(static_cast<pid_t>(v));
  }
  if (out.empty()) return std::nullopt;
  return out;
}

}  // namespace gcr::gcrd
