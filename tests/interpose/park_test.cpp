// Park and unpark (interpose/park.cpp): a quiesced process hands every region over as an fd and
// keeps no device memory; given the fds back, it maps them at the same addresses and goes on
// computing on the same data.
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "common.h"

namespace ipt {
namespace {

// simgpu's device memory a process holds: its allocations are memfds named simgpu-dev<N>, held
// open by the driver while a handle or a mapping needs them, and mapped into its private alias.
struct Held {
  std::vector<ino_t> memfds;      // inodes of the simgpu-dev memfds among its fds
  std::vector<std::string> maps;  // its mappings of them
};

Held device_memory_held(pid_t pid) {
  Held h;
  std::string dir = "/proc/" + std::to_string(pid) + "/fd/";
  for (const std::string& fd : fd_names(pid)) {
    char target[256];
    ssize_t n = readlink((dir + fd).c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = 0;
    struct stat st {};
    if (std::strstr(target, "memfd:simgpu-dev") && stat((dir + fd).c_str(), &st) == 0)
      h.memfds.push_back(st.st_ino);
  }
  h.maps = maps_lines(pid, "simgpu-dev");
  return h;
}

ino_t inode_of(int fd) {
  struct stat st {};
  REQUIRE(fstat(fd, &st) == 0);
  return st.st_ino;
}

// After park the driver holds none of the process's device memory: not gcr's regions, and not
// the allocations behind the program's own handles either (Note [Virtual allocation handles]:
// those handles are gcr's values, and park let go of the real ones).
void check_nothing_held(pid_t pid, const std::vector<control::ParkedRegion>& parked) {
  Held h = device_memory_held(pid);
  INFO("mappings left: " << (h.maps.empty() ? std::string("none") : h.maps.front()));
  CHECK(h.maps.empty());
  for (ino_t ino : h.memfds) {
    std::string which = "no parked region";
    for (const auto& p : parked)
      if (inode_of(p.fd.get()) == ino) which = "region " + hex(p.region.address);
    FAIL_CHECK("a simgpu-dev memfd (inode " << ino << ", " << which
                                            << ") is still open in the parked process");
  }
}

// The pattern `seed` read through a parked region's fd at the pointer's offset.
void check_through_fd(const control::ParkedRegion& parked, const PrintedPtr& p, unsigned seed) {
  struct stat st {};
  REQUIRE(fstat(parked.fd.get(), &st) == 0);
  REQUIRE(static_cast<std::uint64_t>(st.st_size) >= parked.region.size);
  void* map = mmap(nullptr, parked.region.size, PROT_READ, MAP_SHARED, parked.fd.get(), 0);
  REQUIRE(map != MAP_FAILED);
  const auto* words = reinterpret_cast<const unsigned*>(static_cast<const char*>(map) +
                                                        (p.address - parked.region.address));
  std::size_t bad = 0, first_bad = 0;
  for (std::size_t i = 0; i < p.bytes / 4; ++i)
    if (words[i] != probe_word(seed, static_cast<unsigned>(i)) && bad++ == 0) first_bad = i;
  munmap(map, parked.region.size);
  INFO(p.label << ": " << bad << " words differ, the first at word " << first_bad);
  CHECK(bad == 0);
}

TEST_CASE(
    "park hands over every region with its data, and unpark brings it back at the same addresses",
    "[park]") {
  Child child = Child::mode({"park"}, gcr_env());
  std::vector<std::string> lines;
  REQUIRE(child.read_until("ready", 30000, &lines));
  std::vector<PrintedPtr> ptrs;
  for (auto& l : lines)
    if (auto p = parse_ptr(l)) ptrs.push_back(*p);
  REQUIRE(ptrs.size() == 5);
  REQUIRE_FALSE(device_memory_held(child.pid()).memfds.empty());
  std::uint64_t user_address = 0;
  for (const PrintedPtr& p : ptrs)
    if (p.label == "vmm_user") user_address = p.address;

  control::Client client = connect(child.pid());
  auto before = client.regions();
  REQUIRE(before);
  REQUIRE(client.quiesce(std::chrono::seconds(10)));
  auto parked = client.park();
  REQUIRE(parked);
  auto status = client.status();
  REQUIRE(status);
  CHECK(status->state == control::ProcessState::parked);

  // Every region came out, and the process holds no device memory any more.
  REQUIRE(parked->size() == before->size());
  std::vector<control::RegionRecord> parked_records;
  for (const auto& p : *parked) {
    parked_records.push_back(p.region);
    CHECK(p.fd.valid());
  }
  for (std::size_t i = 0; i < before->size(); ++i) {
    CHECK(hex(parked_records[i].address) == hex((*before)[i].address));
    CHECK(parked_records[i].size == (*before)[i].size);
    CHECK(parked_records[i].device == (*before)[i].device);
  }
  check_nothing_held(child.pid(), *parked);
  std::printf(
      "park: %zu regions handed over (one of them the program's own cuMemCreate "
      "allocation at %s); the process holds no device memory\n",
      parked->size(), hex(user_address).c_str());

  // The data is in the fds (simgpu's allocations are memfds: the bytes are right there).
  for (const PrintedPtr& p : ptrs) {
    const control::ParkedRegion* holder = nullptr;
    for (const auto& r : *parked)
      if (p.address >= r.region.address && p.address + p.bytes <= r.region.address + r.region.size)
        holder = &r;
    INFO(p.label);
    REQUIRE(holder != nullptr);
    CHECK(holder->region.device == std::stoul(p.extra.at(1)));
    check_through_fd(*holder, p, static_cast<unsigned>(std::stoul(p.extra.at(0))));
  }

  REQUIRE(client.unpark(*parked));
  status = client.status();
  REQUIRE(status);
  CHECK(status->state == control::ProcessState::quiesced);
  auto after = client.regions();
  REQUIRE(after);
  REQUIRE(after->size() == before->size());
  for (std::size_t i = 0; i < after->size(); ++i) {
    CHECK(hex((*after)[i].address) == hex((*before)[i].address));
    CHECK((*after)[i].size == (*before)[i].size);
    CHECK((*after)[i].device == (*before)[i].device);
  }
  CHECK(device_memory_held(child.pid()).memfds.size() >= parked->size());
  CHECK_FALSE(device_memory_held(child.pid()).maps.empty());
  REQUIRE(client.resume());
  REQUIRE(client.close());
  parked->clear();  // the test's copies of the fds

  // The program finds its data where it left it, and computes on it.
  child.send("verify");
  std::vector<std::string> out;
  auto verified = child.read_until("verified", 60000, &out);
  INFO("last line: " << (out.empty() ? std::string() : out.back()));
  CHECK(verified == std::optional<std::string>("verified ok"));
  child.send("exit");
  CHECK(describe_status(child.wait()) == "exit 0");
}

TEST_CASE("park twice in one process: the second round trip works like the first", "[park]") {
  Child child = Child::mode({"park"}, gcr_env());
  std::vector<std::string> lines;
  REQUIRE(child.read_until("ready", 30000, &lines));
  for (int round = 0; round < 2; ++round) {
    INFO("round " << round);
    control::Client client = connect(child.pid());
    REQUIRE(client.quiesce(std::chrono::seconds(10)));
    auto parked = client.park();
    REQUIRE(parked);
    check_nothing_held(child.pid(), *parked);
    REQUIRE(client.unpark(*parked));
    REQUIRE(client.resume());
    REQUIRE(client.close());
    child.send("verify");
    CHECK(child.read_until("verified", 60000) == std::optional<std::string>("verified ok"));
  }
  child.send("exit");
  CHECK(describe_status(child.wait()) == "exit 0");
}

TEST_CASE("park refuses a process that is not quiesced", "[park]") {
  Child child = Child::mode({"wait"}, gcr_env());
  REQUIRE(child.read_until("ready", 30000));
  control::Client client = connect(child.pid());
  auto parked = client.park();
  REQUIRE_FALSE(parked);
  CHECK(parked.error().message.find("quiesce") != std::string::npos);
  REQUIRE(client.close());
  child.send("exit");
  CHECK(describe_status(child.wait()) == "exit 0");
}

// The program's own handles (PyTorch's expandable segments keep one per page for the segment's
// life): park takes the memory from under them too, including an allocation the program holds but
// has unmapped, and the handles work as before once it is back.
TEST_CASE("park releases the memory behind the program's own handles, and they work after",
          "[park]") {
  Child child = Child::mode({"handles"}, gcr_env());
  std::vector<std::string> lines;
  REQUIRE(child.read_until("ready", 30000, &lines));
  CHECK(std::find(lines.begin(), lines.end(), "checks ok") != lines.end());
  for (const auto& l : lines) INFO(l);

  control::Client client = connect(child.pid());
  auto none = client.blockers();
  REQUIRE(none);
  CHECK(none->empty());
  auto before = client.regions();
  REQUIRE(before);
  REQUIRE(client.quiesce(std::chrono::seconds(10)));
  auto parked = client.park();
  REQUIRE(parked);
  // The unmapped allocation parks too, under an address of gcr's for the park's duration.
  CHECK(parked->size() == before->size() + 1);
  check_nothing_held(child.pid(), *parked);
  const control::ParkedRegion* held = nullptr;
  for (const auto& p : *parked) {
    bool listed = false;
    for (const auto& r : *before) listed = listed || r.address == p.region.address;
    if (!listed) held = &p;
  }
  REQUIRE(held != nullptr);
  check_through_fd(*held, PrintedPtr{"held", held->region.address, held->region.size, {}}, 22u);
  REQUIRE(client.unpark(*parked));
  auto after = client.regions();
  REQUIRE(after);
  CHECK(after->size() == before->size());
  REQUIRE(client.resume());
  parked->clear();

  child.send("verify");
  std::vector<std::string> out;
  auto verified = child.read_until("verified", 60000, &out);
  CHECK(verified == std::optional<std::string>("verified ok"));
  REQUIRE(client.close());
  child.send("exit");
  CHECK(describe_status(child.wait()) == "exit 0");
}

// Note [Shared regions]: exported memory is no blocker of the process's own; it is reported, with
// the key gcrd joins its importers by (the identity of the exported fd), and parks like the rest.
TEST_CASE("memory exported to other processes is reported with its share key, and parks",
          "[park]") {
  Child child = Child::mode({"handles"}, gcr_env());
  REQUIRE(child.read_until("ready", 30000));
  control::Client client = connect(child.pid());
  auto none = client.shares();
  REQUIRE(none);
  CHECK(none->empty());
  child.send("share");
  REQUIRE(child.read_until("shared", 30000));
  auto blockers = client.blockers();
  REQUIRE(blockers);
  CHECK(blockers->empty());
  auto shares = client.shares();
  REQUIRE(shares);
  REQUIRE(shares->size() == 1);
  CHECK((*shares)[0].flags == control::kShareExported);
  REQUIRE((*shares)[0].keys.size() == 1);
  CHECK((*shares)[0].keys[0] != 0);
  REQUIRE(client.quiesce(std::chrono::seconds(10)));
  auto parked = client.park();
  REQUIRE(parked);
  REQUIRE(client.unpark(*parked));
  // Given back, the region's key is the identity of the fd it was given (the one gcrd gives every
  // view of it in a job).
  auto after = client.shares();
  REQUIRE(after);
  REQUIRE(after->size() == 1);
  REQUIRE(after->at(0).keys.size() == 1);
  struct stat st {};
  bool found = false;
  for (const auto& p : *parked)
    if (p.region.address == after->at(0).address) {
      REQUIRE(::fstat(p.fd.get(), &st) == 0);
      found = true;
    }
  CHECK(found);
  CHECK(after->at(0).keys[0] == control::share_key(st.st_dev, st.st_ino));
  REQUIRE(client.resume());
  REQUIRE(client.close());
  child.send("verify");
  CHECK(child.read_until("verified", 60000) == std::optional<std::string>("verified ok"));
  child.send("exit");
  CHECK(describe_status(child.wait()) == "exit 0");
}

// Note [IPC memory under gcr] and Note [Shared regions]: a cuIpc token's memory is reported shared
// by both sides under one key, a token taken before a --leave-running park still opens after it
// (the owner's export is closed at park and made again, at its fd number, at unpark), and parked,
// neither side holds any of it in the driver.
TEST_CASE("a cuIpc token opens after its owner was parked and unparked; both sides share one key",
          "[park]") {
  Child owner = Child::mode({"handles"}, gcr_env());
  Child peer = Child::mode({"handles"}, gcr_env());
  REQUIRE(owner.read_until("ready", 30000));
  REQUIRE(peer.read_until("ready", 30000));
  owner.send("ipc-export");
  auto token = owner.read_until("ipc", 30000);
  REQUIRE(token);
  std::string hex = token->substr(4);
  {
    control::Client client = connect(owner.pid());
    REQUIRE(client.quiesce(std::chrono::seconds(10)));
    auto parked = client.park();
    REQUIRE(parked);
    REQUIRE(client.unpark(*parked));
    REQUIRE(client.resume());
    REQUIRE(client.close());
  }
  peer.send("ipc-open " + hex);
  CHECK(peer.read_until("opened", 30000) == std::optional<std::string>("opened ok"));
  control::Client a = connect(owner.pid());
  auto owner_shares = a.shares();
  REQUIRE(a.close());
  control::Client b = connect(peer.pid());
  auto peer_shares = b.shares();
  REQUIRE(b.close());
  REQUIRE(owner_shares);
  REQUIRE(peer_shares);
  REQUIRE(owner_shares->size() == 1);
  REQUIRE(peer_shares->size() == 1);
  CHECK(owner_shares->at(0).flags == control::kShareExported);
  CHECK(peer_shares->at(0).flags == control::kShareImported);
  bool meet = false;
  for (std::uint64_t k : owner_shares->at(0).keys)
    for (std::uint64_t j : peer_shares->at(0).keys) meet = meet || k == j;
  CHECK(meet);
  // Parked, neither side holds any of it in the driver (the owner's cached export included).
  for (Child* c : {&owner, &peer}) {
    control::Client client = connect(c->pid());
    REQUIRE(client.quiesce(std::chrono::seconds(10)));
    auto parked = client.park();
    REQUIRE(parked);
    check_nothing_held(c->pid(), *parked);
    REQUIRE(client.unpark(*parked));
    REQUIRE(client.resume());
    REQUIRE(client.close());
  }
  for (Child* c : {&owner, &peer}) {
    c->send("exit");
    CHECK(describe_status(c->wait()) == "exit 0");
  }
}

}  // namespace
}  // namespace ipt
