// job_parts.h.
#include "job_parts.h"

#include <sstream>

#include "comma_list.h"
#include "gcr/chunk_id.h"

namespace gcr::gcrd {

std::string encode_job_parts(const std::vector<JobPart>& parts) {
  std::string out;
  for (const JobPart& p : parts) {
    std::string pids;
    for (pid_t pid : p.pids) pids += (pids.empty() ? "" : ",") + std::to_string(pid);
    out += p.address + " " + p.id + " " + pids + "\n";
  }
  return out;
}

Result<std::vector<JobPart>> decode_job_parts(const std::string& text) {
  std::vector<JobPart> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    std::istringstream f(line);
    JobPart p;
    std::string pids, rest;
    f >> p.address >> p.id >> pids;
    bool good = f && store::CheckpointId::from_hex(p.id).has_value() && !(f >> rest);
    auto parsed = parse_pid_list(pids);
    if (parsed) p.pids = std::move(*parsed);
    if (!good || !parsed)
      return Error{Errc::corrupt_image, "manifest META job_parts: a line reads '" +
                                            line.substr(0, 100) + "', not 'HOST:PORT ID PID,...'"};
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace gcr::gcrd
