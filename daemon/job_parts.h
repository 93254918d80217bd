// META job_parts of a job's manifest (Note [A job across hosts] in job_link.h): one line per other
// host's part, "HOST:PORT ID PID,PID" (docs/image-format.md). Read by gcrd, by gcr image push/pull
// (a job's parts go along) and by gcr slurm (a job's old checkpoints removed on every host).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "gcr/result.h"

namespace gcr::gcrd {

struct JobPart {
  std::string address, id;
  std::vector<pid_t> pids;
};
std::string encode_job_parts(const std::vector<JobPart>& parts);
Result<std::vector<JobPart>> decode_job_parts(const std::string& text);

}  // namespace gcr::gcrd
