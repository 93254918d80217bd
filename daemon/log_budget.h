// A budget for log lines a peer can cause (refused connections): so many a minute, then a count of
// those left out, so that a flood of bad connections cannot fill the disk through gcrd.log.
#pragma once

#include <chrono>
#include <mutex>
#include <optional>
#include <string>

namespace gcr::gcrd {

class LogBudget {
 public:
  using Clock = std::chrono::steady_clock;

  explicit LogBudget(int lines_per_minute) : per_minute_(lines_per_minute) {}

  // The line to log (with a note of what was left out since the last one), or nullopt when the
  // minute's budget is spent.
  std::optional<std::string> admit(const std::string& line, Clock::time_point now = Clock::now()) {
    std::lock_guard lock(mu_);
    if (now - window_start_ >= std::chrono::minutes(1)) {
      window_start_ = now;
      in_window_ = 0;
    }
    if (in_window_ >= per_minute_) {
      ++left_out_;
      return std::nullopt;
    }
    ++in_window_;
    if (left_out_ == 0) return line;
    std::string noted = line + " (and " + std::to_string(left_out_) + " more like it not logged)";
    left_out_ = 0;
    return noted;
  }

 private:
  std::mutex mu_;
  const int per_minute_;
  Clock::time_point window_start_{};
  int in_window_ = 0;
  long left_out_ = 0;
};

}  // namespace gcr::gcrd
