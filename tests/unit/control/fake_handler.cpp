// FakeHandler and FakeTarget (fake_handler.h).
#include "fake_handler.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gcr::control::testing {

FakeHandler::FakeHandler(int count, std::size_t bytes_each) {
  for (int i = 0; i < count; ++i) {
    records_.push_back(record(i, bytes_each));
    UniqueFd fd(memfd_create("fake-region", MFD_CLOEXEC));
    std::string bytes = pattern(i, bytes_each);
    if (!fd ||
        pwrite(fd.get(), bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) {
      std::perror("fake region");
      std::abort();
    }
    fds_.push_back(std::move(fd));
  }
}

std::string FakeHandler::pattern(int i, std::size_t n) {
  std::string s;
  s.reserve(n);
  while (s.size() < n) s += "region-" + std::to_string(i) + ";";
  s.resize(n);
  return s;
}

RegionRecord FakeHandler::record(int i, std::size_t bytes_each) {
  return RegionRecord{0x7f0000000000ull + std::uint64_t(i) * 0x200000ull, bytes_each,
                      static_cast<std::uint32_t>(i % 2), i % 2 == 0 ? kRegionDirty : 0u};
}

Status FakeHandler::quiesce(std::chrono::milliseconds) {
  if (on_quiesce) on_quiesce();
  std::lock_guard lock(mu_);
  if (state_ == ProcessState::parked) return make_error(Errc::invalid_argument, "parked");
  state_ = ProcessState::quiesced;
  return ok();
}

Status FakeHandler::resume() {
  std::lock_guard lock(mu_);
  if (state_ == ProcessState::parked)
    return make_error(Errc::invalid_argument, "the process is parked: unpark it before resuming");
  state_ = ProcessState::running;
  ++resume_calls_;
  return ok();
}

Result<std::vector<ParkedRegion>> FakeHandler::park() {
  std::lock_guard lock(mu_);
  if (state_ != ProcessState::quiesced)
    return make_error(Errc::invalid_argument, "park needs a quiesced process (send quiesce first)");
  std::vector<ParkedRegion> out;
  for (std::size_t i = 0; i < records_.size(); ++i)
    out.push_back(ParkedRegion{records_[i], std::move(fds_[i])});
  fds_.clear();
  state_ = ProcessState::parked;
  return out;
}

Status FakeHandler::unpark(std::vector<ParkedRegion> regions) {
  std::lock_guard lock(mu_);
  ++unpark_calls_;
  if (state_ != ProcessState::parked) return make_error(Errc::invalid_argument, "not parked");
  if (regions.size() != records_.size())
    return make_error(Errc::invalid_argument, "unpark needs every region of the park: got " +
                                                  std::to_string(regions.size()) + " of " +
                                                  std::to_string(records_.size()));
  for (std::size_t i = 0; i < regions.size(); ++i)
    if (!(regions[i].region == records_[i]) || !regions[i].fd)
      return make_error(Errc::invalid_argument, "region " + std::to_string(i) + " differs");
  for (ParkedRegion& p : regions) fds_.push_back(std::move(p.fd));
  state_ = ProcessState::quiesced;
  return ok();
}

Status FakeHandler::new_epoch(const std::string& checkpoint_id) {
  std::lock_guard lock(mu_);
  ++epoch_;
  last_checkpoint_ = checkpoint_id;
  for (RegionRecord& r : records_) r.flags &= ~kRegionDirty;
  return ok();
}

StatusInfo FakeHandler::status() {
  std::lock_guard lock(mu_);
  StatusInfo s;
  s.state = state_;
  s.regions = records_.size();
  for (const RegionRecord& r : records_) {
    s.region_bytes += r.size;
    if (r.flags & kRegionDirty) s.dirty_bytes += r.size;
  }
  s.requested_bytes = s.region_bytes / 2;
  s.epoch = epoch_;
  s.last_checkpoint = last_checkpoint_;
  return s;
}

std::vector<RegionRecord> FakeHandler::regions() {
  std::lock_guard lock(mu_);
  return records_;
}

int FakeHandler::unpark_calls() const {
  std::lock_guard lock(mu_);
  return unpark_calls_;
}
int FakeHandler::resume_calls() const {
  std::lock_guard lock(mu_);
  return resume_calls_;
}
std::size_t FakeHandler::fds_held() const {
  std::lock_guard lock(mu_);
  return fds_.size();
}
ProcessState FakeHandler::state() const {
  std::lock_guard lock(mu_);
  return state_;
}

FakeTarget::FakeTarget(int count, std::function<void(FakeHandler&)> setup, bool serve) {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) std::abort();
  pid_ = fork();
  if (pid_ < 0) std::abort();
  if (pid_ == 0) {
    ::close(ready[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a test run that crashed
    auto server = Server::create();
    if (!server) {
      std::fprintf(stderr, "fake target: %s\n", server.error().message.c_str());
      _exit(3);
    }
    FakeHandler handler(count);
    if (setup) setup(handler);
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(4);
    if (serve) (*server)->serve_forever(handler);
    for (;;) pause();
  }
  ::close(ready[1]);
  char c;
  if (read(ready[0], &c, 1) != 1) {
    std::fprintf(stderr, "fake target %d did not start\n", pid_);
    std::abort();
  }
  ::close(ready[0]);
}

FakeTarget::~FakeTarget() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

void FakeTarget::kill_now() {
  ::kill(pid_, SIGKILL);
  // Wait until it is a zombie (not reaped), so that callers see an exited process.
  for (int i = 0; i < 500; ++i) {
    siginfo_t si{};
    if (waitid(P_PID, pid_, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid_) return;
    usleep(2000);
  }
}

std::string read_fd(int fd, std::size_t n) {
  std::string s(n, '\0');
  ssize_t got = pread(fd, s.data(), n, 0);
  s.resize(got < 0 ? 0 : static_cast<std::size_t>(got));
  return s;
}

int count_sockets(pid_t pid) {
  std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = opendir(dir.c_str());
  if (!d) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    char target[128];
    ssize_t len = readlink((dir + "/" + e->d_name).c_str(), target, sizeof target - 1);
    if (len > 0 && std::strncmp(target, "socket:", 7) == 0) ++n;
  }
  closedir(d);
  return n;
}

}  // namespace gcr::control::testing
