// A gcr command the job's supervisor runs beside its work (this very binary, /proc/self/exe):
// its stderr is the job's (what it says lands in the job's output), its stdout kept for the
// supervisor (--json), its end seen through a pidfd in the supervisor's poll loop.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "gcr/result.h"
#include "gcr/unique_fd.h"

namespace gcr::slurm {

class ChildCommand {
 public:
  // gcr itself with `args` ("checkpoint", "--job", ...); `what` names it in messages.
  static Result<ChildCommand> gcr(const std::vector<std::string>& args, std::string what);
  // Program argv[0] (looked up on PATH) with its arguments.
  static Result<ChildCommand> start(const std::vector<std::string>& argv, std::string what);
  ChildCommand(ChildCommand&&) noexcept;
  ChildCommand& operator=(ChildCommand&&) = delete;
  ~ChildCommand();  // a command still running is killed and reaped

  int pidfd() const { return pidfd_.get(); }  // readable once it ended
  const std::string& what() const { return what_; }
  // Once it ended: its exit code (128 + N when killed by signal N), and what it printed.
  Result<int> finish();
  const std::string& output() const { return output_; }
  // Waits for it (finish() after).
  Result<int> wait();
  void kill(int sig);

 private:
  ChildCommand() = default;
  pid_t pid_ = -1;
  UniqueFd pidfd_, out_;
  std::string what_, output_;
};

}  // namespace gcr::slurm
