// A Handler for tests: `count` regions backed by memfds whose bytes are pattern(i, size), with
// the region manager's state machine (running -> quiesced -> parked -> quiesced -> running), and
// a helper that runs one in a forked process behind a real Server (FakeTarget).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "gcr/control.h"

namespace gcr::control::testing {

class FakeHandler : public Handler {
 public:
  explicit FakeHandler(int count, std::size_t bytes_each = 4096);

  // The bytes region i starts with.
  static std::string pattern(int i, std::size_t n);
  static RegionRecord record(int i, std::size_t bytes_each);

  Status quiesce(std::chrono::milliseconds timeout) override;
  Status resume() override;
  Result<std::vector<ParkedRegion>> park() override;
  Status unpark(std::vector<ParkedRegion> regions) override;
  Status new_epoch(const std::string& checkpoint_id) override;
  StatusInfo status() override;
  std::vector<RegionRecord> regions() override;

  // Runs at the start of quiesce (e.g. _exit, to play a process that dies mid-request).
  std::function<void()> on_quiesce;

  // For white-box checks.
  int unpark_calls() const;
  int resume_calls() const;
  std::size_t fds_held() const;  // regions whose allocation this side holds now
  ProcessState state() const;

 private:
  mutable std::mutex mu_;
  ProcessState state_ = ProcessState::running;
  std::vector<RegionRecord> records_;
  std::vector<UniqueFd> fds_;  // empty while parked
  std::uint64_t epoch_ = 0;
  std::string last_checkpoint_;
  int unpark_calls_ = 0;
  int resume_calls_ = 0;
};

// A forked child running a Server with a FakeHandler of `count` regions (and `setup` applied to
// it) in its main thread; killed and reaped when destroyed.
class FakeTarget {
 public:
  explicit FakeTarget(int count, std::function<void(FakeHandler&)> setup = {}, bool serve = true);
  ~FakeTarget();
  FakeTarget(const FakeTarget&) = delete;
  FakeTarget& operator=(const FakeTarget&) = delete;

  pid_t pid() const { return pid_; }
  // Kills the target (SIGKILL) without reaping it: it stays a zombie until the destructor.
  void kill_now();

 private:
  pid_t pid_ = -1;
};

// The file content of an fd, from offset 0 (up to n bytes).
std::string read_fd(int fd, std::size_t n);
// How many of pid's fds are sockets.
int count_sockets(pid_t pid);

}  // namespace gcr::control::testing
