// gcr_forge: what a hostile program under gcr (or its owner) can say to gcr over the control
// channel, for the security tests (tests/integration/security). It talks to a process the way
// gcrd does, as whoever runs it: the process's owner may control it.
//
//   gcr_forge new-epoch PID CHECKPOINT_ID   the process now claims CHECKPOINT_ID as its last
//                                           checkpoint, with every region clean since then
//   gcr_forge chaos FILE                    a process whose every control answer is drawn from the
//                                           bytes of FILE (security.control_fuzz)
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
  Status cow_begin(UniqueFd table, UniqueFd, std::uint32_t) override {
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

// A hostile process whose every answer to gcrd is drawn from a byte stream (a fuzz input, the
// corpus of tests/fuzz/corpus/gcrd_live): errors, region lists of any length, address, size and
// device, regions with no fd, fds of the wrong size or unsealed, copies of the wrong size or
// index, status and first-touch lists made up. gcrd must fail that process's checkpoint, never
// itself (security.control_fuzz).
class Chaos : public Handler {
 public:
  explicit Chaos(std::vector<std::uint8_t> bytes) : bytes_(std::move(bytes)) {}
  Status quiesce(std::chrono::milliseconds) override { return maybe_error("quiesce"); }
  Status resume() override { return maybe_error("resume"); }
  Result<std::vector<ParkedRegion>> park() override {
    if (byte() % 16 == 0) return Error{Errc::internal, "chaos: park"};
    std::vector<ParkedRegion> out;
    for (const RegionRecord& r : records()) {
      UniqueFd fd;
      switch (byte() % 8) {
        case 0:
          break;  // no fd at all
        case 1:
          fd = memfd(r.size, true);
          break;
        case 2:
          fd = memfd(r.size, false);
          break;  // unsealed
        case 3:
          fd = memfd(kRegionBytes / 2, true);
          break;  // smaller than it says
        default:
          fd = memfd(kRegionBytes, true);
          break;
      }
      out.push_back({r, std::move(fd)});
    }
    return out;
  }
  Status unpark(std::vector<ParkedRegion>) override { return maybe_error("unpark"); }
  Status new_epoch(const std::string&) override { return maybe_error("new_epoch"); }
  StatusInfo status() override {
    StatusInfo s;
    // Mostly plausible, so that gcrd goes further than its first check.
    s.state = static_cast<ProcessState>(byte() % 16 == 0 ? 3 + byte() % 8 : 0);
    s.regions = u64();
    s.region_bytes = u64();
    s.dirty_bytes = u64();
    s.epoch = u64();
    if (byte() % 2) s.last_checkpoint = std::string(32, "0123456789abcdef"[byte() % 16]);
    return s;
  }
  std::vector<RegionRecord> regions() override { return records(); }
  Status cow_begin(UniqueFd table, UniqueFd, std::uint32_t) override {
    if (byte() % 2) (void)ftruncate(table.get(), byte() % 2 ? 0 : 1 << 20);
    return maybe_error("cow_begin");
  }
  Result<CowCopy> cow_take(std::uint32_t index) override {
    if (byte() % 3 == 0) return Error{Errc::internal, "chaos: cow_take"};
    CowCopy c;
    c.index = byte() % 2 ? index : static_cast<std::uint32_t>(u64());
    c.size = byte() % 2 ? kRegionBytes : u64();
    c.fd = memfd(kRegionBytes, byte() % 2);
    return c;
  }
  std::vector<std::uint64_t> touch_order() override {
    std::vector<std::uint64_t> out(byte() * 4);
    for (auto& a : out) a = u64();
    return out;
  }

 private:
  std::uint8_t byte() {
    std::lock_guard lock(mu_);
    return bytes_.empty() ? 0 : bytes_[pos_++ % bytes_.size()];
  }
  std::uint64_t u64() {
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | byte();
    return v;
  }
  Status maybe_error(const char* what) {
    if (byte() % 16 == 0) return Error{Errc::internal, std::string("chaos: ") + what};
    return ok();
  }
  std::vector<RegionRecord> records() {
    std::vector<RegionRecord> out(byte() % 40);
    for (std::size_t i = 0; i < out.size(); ++i) {
      bool plausible = byte() % 8 != 0;
      out[i].address = plausible ? 0x7f0000000000ull + i * kRegionBytes : u64();
      out[i].size = plausible ? kRegionBytes : u64();
      out[i].device = byte() % 2 ? 0 : byte();
      out[i].flags = byte();
    }
    return out;
  }
  UniqueFd memfd(std::uint64_t size, bool sealed) {
    UniqueFd fd(memfd_create("simgpu-dev0", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!fd) return fd;
    if (size > (64ull << 20)) size = 64ull << 20;  // sizes are lies; memory is not spent on them
    (void)ftruncate(fd.get(), static_cast<off_t>(size));
    if (sealed) (void)fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
    return fd;
  }

  std::mutex mu_;
  std::vector<std::uint8_t> bytes_;
  std::size_t pos_ = 0;
};

int serve_handler(Handler& handler) {
  auto server = Server::create();
  if (!server) {
    std::fprintf(stderr, "gcr_forge: %s\n", server.error().message.c_str());
    return 1;
  }
  std::thread([s = server->get(), &handler] { s->serve_forever(handler); }).detach();
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) pause();
}

int serve(int regions) {
  static Hostile handler(regions);
  return serve_handler(handler);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "serve") return serve(std::atoi(argv[2]));
  if (argc == 3 && std::string(argv[1]) == "chaos") {
    std::FILE* f = std::fopen(argv[2], "rb");
    if (!f) {
      std::perror(argv[2]);
      return 2;
    }
    std::vector<std::uint8_t> bytes;
    for (int c; (c = std::fgetc(f)) != EOF;) bytes.push_back(static_cast<std::uint8_t>(c));
    std::fclose(f);
    static Chaos handler(std::move(bytes));
    return serve_handler(handler);
  }
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
