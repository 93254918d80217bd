// gcr_forge: what a hostile program under gcr (or its owner) can say to gcr over the control
// channel, for the security tests (tests/integration/security). It talks to a process the way
// gcrd does, as whoever runs it: the process's owner may control it.
//
//   gcr_forge new-epoch PID CHECKPOINT_ID   the process now claims CHECKPOINT_ID as its last
//                                           checkpoint, with every region clean since then
//   gcr_forge serve REGIONS                 a hostile process under gcr: it serves the control
//                                           protocol itself, parks REGIONS 2 MiB regions of
//                                           simgpu memory, and truncates every shared memfd gcrd
//                                           hands it (the copy-on-write table) and its regions;
//                                           prints "ready", then what each truncation did
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gcr/control.h"

using namespace gcr;
using namespace gcr::control;

namespace {

constexpr std::uint64_t kRegionBytes = 2ull << 20;

void report(const char* what, int rc) {
  std::printf("truncate %s: %s\n", what, rc == 0 ? "done" : std::strerror(errno));
  std::fflush(stdout);
}

class Hostile : public Handler {
 public:
  explicit Hostile(int n) {
    for (int i = 0; i < n; ++i) {
      // As simgpu makes an exportable allocation, so that gcrd imports it.
      UniqueFd fd(memfd_create("simgpu-dev0", MFD_CLOEXEC | MFD_ALLOW_SEALING));
      if (!fd || ftruncate(fd.get(), kRegionBytes) != 0 ||
          fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        std::perror("region");
        std::exit(1);
      }
      records_.push_back(
          {0x7f0000000000ull + std::uint64_t(i) * kRegionBytes, kRegionBytes, 0, kRegionDirty});
      fds_.push_back(std::move(fd));
    }
  }
  Status quiesce(std::chrono::milliseconds) override {
    if (state_ == ProcessState::running) state_ = ProcessState::quiesced;
    return ok();
  }
  Status resume() override {
    state_ = ProcessState::running;
    return ok();
  }
  Result<std::vector<ParkedRegion>> park() override {
    std::vector<ParkedRegion> out;
    for (std::size_t i = 0; i < records_.size(); ++i)
      out.push_back({records_[i], UniqueFd(fcntl(fds_[i].get(), F_DUPFD_CLOEXEC, 3))});
    state_ = ProcessState::parked;
    return out;
  }
  Status unpark(std::vector<ParkedRegion>) override {
    state_ = ProcessState::quiesced;
    for (auto& fd : fds_) report("a parked region", ftruncate(fd.get(), 0));
    return ok();
  }
  Status new_epoch(const std::string&) override { return ok(); }
  StatusInfo status() override {
    StatusInfo s;
    s.state = state_;
    s.regions = records_.size();
    s.region_bytes = records_.size() * kRegionBytes;
    return s;
  }
  std::vector<RegionRecord> regions() override { return records_; }
  Status cow_begin(UniqueFd table, std::uint32_t) override {
    report("the copy-on-write table", ftruncate(table.get(), 0));
    return ok();
  }
  Result<CowCopy> cow_take(std::uint32_t) override {
    return Error{Errc::invalid_argument, "no copies here"};
  }

 private:
  ProcessState state_ = ProcessState::running;
  std::vector<RegionRecord> records_;
  std::vector<UniqueFd> fds_;
};

int serve(int regions) {
  auto server = Server::create();
  if (!server) {
    std::fprintf(stderr, "gcr_forge: %s\n", server.error().message.c_str());
    return 1;
  }
  static Hostile handler(regions);
  std::thread([s = server->get()] { s->serve_forever(handler); }).detach();
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) pause();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "serve") return serve(std::atoi(argv[2]));
  if (argc != 4 || std::string(argv[1]) != "new-epoch") {
    std::fprintf(stderr, "usage: gcr_forge new-epoch PID CHECKPOINT_ID | serve REGIONS\n");
    return 2;
  }
  pid_t pid = static_cast<pid_t>(std::atoi(argv[2]));
  auto client = Client::connect(pid, std::chrono::seconds(10));
  if (!client) {
    std::fprintf(stderr, "gcr_forge: %s\n", client.error().message.c_str());
    return 1;
  }
  if (auto s = client->new_epoch(argv[3]); !s) {
    std::fprintf(stderr, "gcr_forge: %s\n", s.error().message.c_str());
    return 1;
  }
  (void)client->close();
  return 0;
}
