// Note [A task and its supervisor]
// Each task of a `--gcr` step tells the job's supervisor (the batch script's `gcr slurm batch`,
// GCR_SLURM_SUPERVISOR) who it is, over TCP, one line each way (docs/protocol.md §16):
//
//   task:        gcr-slurm/1 KEY register STEP PROCID NTASKS NODE PID GCRD
//   supervisor:  run | restored PID | error MESSAGE
//
// KEY is GCR_SLURM_KEY (random, in the job's environment only); GCRD the HOST:PORT of the task's
// node's gcrd (its --listen). `run`: start the program under gcr; `restored PID`: the step was
// restored from a checkpoint and the task's rank is PID on this node (the task waits for it);
// `error`: neither. The supervisor answers a step's tasks only once all NTASKS have registered
// when it restores the step (a job's restore needs every host's gcrd), at once otherwise.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "gcr/result.h"

namespace gcr::slurm {

struct Registration {
  std::uint32_t step = 0;
  unsigned procid = 0, ntasks = 0, node = 0;
  pid_t pid = 0;
  std::string gcrd;  // HOST:PORT
};

struct Answer {
  enum class Kind { run, restored, error } kind = Kind::run;
  pid_t pid = 0;
  std::string message;
};

std::string encode_registration(const std::string& key, const Registration& r);
// The line without its newline; an error for another protocol, a wrong key or a bad field.
Result<Registration> decode_registration(const std::string& line, const std::string& key);
std::string encode_answer(const Answer& a);
Result<Answer> decode_answer(const std::string& line);

// One line (without '\n') of at most `max` bytes; timeout_ms < 0 waits for ever.
Result<std::string> read_line(int fd, std::size_t max, int timeout_ms);
Status write_all(int fd, const std::string& text);

}  // namespace gcr::slurm
