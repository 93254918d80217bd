// interpose/agent.cpp with stand-in region-manager operations (agent_ops.h): the control
// thread starts once, carries requests to the op_* functions and back, and a forked child drops
// the mailbox. A separate executable, because it owns the process's one agent thread.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "agent.h"
#include "agent_ops.h"
#include "gcr/control.h"

// ---- stand-ins for the region manager (interpose/park.cpp in the interposer) -------------------
namespace gcr::interpose {
namespace {
ProcessState g_state = ProcessState::running;
std::vector<RegionRecord> g_records = {{0x7f0000000000, 8192, 0, kRegionDirty},
                                       {0x7f0000200000, 4096, 1, 0}};
std::vector<UniqueFd> g_fds;
std::string g_last;
std::uint64_t g_epoch = 0;
unsigned g_last_timeout_ms = 0;

void make_fds() {
  for (std::size_t i = 0; i < g_records.size(); ++i) {
    UniqueFd fd(memfd_create("op-region", MFD_CLOEXEC));
    std::string bytes = "op-region-" + std::to_string(i);
    (void)!pwrite(fd.get(), bytes.data(), bytes.size(), 0);
    g_fds.push_back(std::move(fd));
  }
}
}  // namespace

Status op_quiesce(unsigned timeout_ms) {
  g_last_timeout_ms = timeout_ms;
  if (g_state == ProcessState::running) g_state = ProcessState::quiesced;
  return ok();
}
Status op_resume() {
  if (g_state == ProcessState::parked) return make_error(Errc::invalid_argument, "parked");
  g_state = ProcessState::running;
  return ok();
}
Result<std::vector<ParkedRegion>> op_park() {
  if (g_state != ProcessState::quiesced) return make_error(Errc::invalid_argument, "not quiesced");
  std::vector<ParkedRegion> out;
  for (std::size_t i = 0; i < g_records.size(); ++i)
    out.push_back(ParkedRegion{g_records[i], std::move(g_fds[i])});
  g_fds.clear();
  g_state = ProcessState::parked;
  return out;
}
Status op_unpark(std::vector<ParkedRegion> regions) {
  if (g_state != ProcessState::parked) return make_error(Errc::invalid_argument, "not parked");
  if (regions.size() != g_records.size()) return make_error(Errc::invalid_argument, "count");
  for (ParkedRegion& p : regions) g_fds.push_back(std::move(p.fd));
  g_state = ProcessState::quiesced;
  return ok();
}
Status op_new_epoch(const std::string& checkpoint_id) {
  g_last = checkpoint_id;
  ++g_epoch;
  return ok();
}
Status op_cow_begin(UniqueFd, UniqueFd, std::uint32_t) {
  return make_error(Errc::unsupported, "stand-in");
}
Result<CowCopy> op_cow_take(std::uint32_t) {
  return make_error(Errc::unsupported, "stand-in");
}
void op_cow_end() {}
std::vector<std::uint64_t> op_touch_order() {
  return {};
}
StatusInfo op_status() {
  StatusInfo s;
  s.state = g_state;
  s.regions = g_records.size();
  for (auto& r : g_records) s.region_bytes += r.size;
  s.requested_bytes = 10000;
  s.epoch = g_epoch;
  s.last_checkpoint = g_last;
  s.conservative = true;
  return s;
}
std::vector<RegionRecord> op_regions() {
  return g_records;
}
std::vector<std::string> g_blockers;
std::vector<std::string> op_blockers() {
  return g_blockers;
}
std::vector<ShareRecord> op_shares() {
  return {};
}
control::CutCounts op_cut(control::CutOp, std::uint64_t) {
  return {0, 0, ~0ull, 0};
}
control::HostDmaRanges op_host_dma() {
  return {{{0x7f0000400000ull, 3ull << 20}}, false};
}
}  // namespace gcr::interpose

namespace {

using namespace gcr;
using namespace std::chrono_literals;

int threads_named(const char* name) {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string line;
    std::getline(comm, line);
    if (line == name) ++n;
  }
  closedir(d);
  return n;
}

bool has_mailbox_fd() {
  DIR* d = opendir("/proc/self/fd");
  bool found = false;
  while (dirent* e = readdir(d)) {
    char target[128] = {};
    if (readlink((std::string("/proc/self/fd/") + e->d_name).c_str(), target, sizeof target - 1) >
            0 &&
        std::strncmp(target, "/memfd:gcr-control", 18) == 0)
      found = true;
  }
  closedir(d);
  return found;
}

struct Started {
  Started() {
    gcr::interpose::make_fds();
    pthread_atfork(gcr::interpose::agent_prepare_fork, gcr::interpose::agent_after_fork_parent,
                   gcr::interpose::agent_after_fork_child);
    Status s = gcr::interpose::start_agent_thread();
    if (!s) FAIL(s.error().message);
  }
};

void ensure_started() {
  static Started started;
}

}  // namespace

TEST_CASE("start_agent_thread starts one thread named gcr-control, once") {
  ensure_started();
  CHECK(gcr::interpose::start_agent_thread());
  CHECK(gcr::interpose::start_agent_thread());
  CHECK(threads_named("gcr-control") == 1);
  CHECK(has_mailbox_fd());
}

TEST_CASE("a caller reaches the region manager's operations through the agent thread") {
  ensure_started();
  auto c = control::Client::connect(getpid(), 5s);
  if (!c) FAIL(c.error().message);
  CHECK(c->server().software == "gcr interposer");

  auto s = c->status();
  REQUIRE(s);
  CHECK(s->regions == 2);
  CHECK(s->region_bytes == 12288);
  CHECK(s->requested_bytes == 10000);
  CHECK(s->conservative);

  auto none = c->blockers();
  REQUIRE(none);
  CHECK(none->empty());
  gcr::interpose::g_blockers = {"device memory at 0x7f0000000000 was exported",
                                std::string(600, 'x')};
  auto two = c->blockers();
  gcr::interpose::g_blockers.clear();
  REQUIRE(two);
  REQUIRE(two->size() == 2);
  CHECK((*two)[0] == "device memory at 0x7f0000000000 was exported");
  CHECK((*two)[1].size() == 512);  // cut to the protocol's bound, not refused

  auto dma = c->host_dma();
  REQUIRE(dma);
  REQUIRE(dma->ranges.size() == 1);
  CHECK(dma->ranges[0] == control::HostDmaRange{0x7f0000400000ull, 3ull << 20});
  CHECK_FALSE(dma->overflow);

  auto r = c->regions();
  REQUIRE(r);
  REQUIRE(r->size() == 2);
  CHECK((*r)[0].flags == control::kRegionDirty);
  CHECK((*r)[1].device == 1);

  REQUIRE(c->quiesce(1500ms));
  CHECK(gcr::interpose::g_last_timeout_ms == 1500);
  auto parked = c->park();
  REQUIRE(parked);
  REQUIRE(parked->size() == 2);
  char buf[16] = {};
  REQUIRE(pread((*parked)[1].fd.get(), buf, 11, 0) == 11);
  CHECK(std::string(buf) == "op-region-1");
  CHECK(c->status()->state == control::ProcessState::parked);
  REQUIRE(c->unpark(*parked));
  REQUIRE(c->new_epoch("ckpt-1"));
  REQUIRE(c->resume());
  CHECK(c->status()->last_checkpoint == "ckpt-1");
  CHECK(c->close());
}

TEST_CASE("a forked child drops the mailbox and is not managed") {
  ensure_started();
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    int code = 0;
    if (has_mailbox_fd()) code |= 1;
    Status s = gcr::interpose::start_agent_thread();
    if (s || s.error().code != Errc::unsupported) code |= 2;
    if (threads_named("gcr-control") != 0) code |= 4;
    _exit(code);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);

  // The parent is still served.
  auto c = control::Client::connect(getpid(), 5s);
  REQUIRE(c);
  CHECK(c->status());
  CHECK(c->close());
}
