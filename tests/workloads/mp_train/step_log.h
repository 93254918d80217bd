// --step-log FILE: one "step S T_ms" line per step, appended and flushed at once, so that a
// benchmark can read a stall off the ranks' own step times while they run.
#pragma once

#include <cstdio>
#include <string>

#include "socket.h"

namespace mp {

class StepLog {
 public:
  explicit StepLog(const std::string& path) : file_(std::fopen(path.c_str(), "a")) {
    if (!file_) fail_errno("--step-log " + path);
  }
  ~StepLog() { std::fclose(file_); }
  StepLog(const StepLog&) = delete;
  StepLog& operator=(const StepLog&) = delete;

  void add(int step, double ms) {
    std::fprintf(file_, "step %d %.3f\n", step, ms);
    std::fflush(file_);
  }

 private:
  std::FILE* file_;
};

}  // namespace mp
