// Note [CRIU's capabilities probed] (gcr/criu_capabilities.h), against stand-ins for CRIU: a script
// that refuses the options it does not know as CRIU's getopt does, and writes the log lines a
// patched CRIU writes when it does know them. The real thing, gcr's CRIU against the stock one, is
// checkpoint.stock_criu.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "gcr/criu_capabilities.h"
#include "scratch_dir.h"

namespace fs = std::filesystem;
using namespace gcr;
using criu::Capability;

namespace {

// KNOWS: the options of gcr's patches it takes; each it takes does its work (its log line).
std::string fake_criu(const std::string& knows) {
  return R"(#!/bin/bash
knows=")" +
         knows + R"("
for a in "$@"; do
  case "$a" in --cow-*)
    [[ " $knows " == *" $a "* ]] || { echo "criu: unrecognized option '$a'" >&2; exit 1; } ;;
  esac
done
[[ $1 == dump ]] || exit 1
dir=""; log=dump.log
while [[ $# -gt 0 ]]; do
  case "$1" in
    -D) dir=$2; shift ;;
    --shell-job) exit 1 ;;  # the terminal and pid namespace probes: as the stock CRIU refuses
    --cow-dump) echo "cow-dump: 3 of 3 ranges write-protected" >> "$dir/$log" ;;
    --cow-dma) echo "cow-dma: pid 1: 2 pages a device may write copied while frozen" >> "$dir/$log" ;;
  esac
  shift
done
[[ -n $CRIU_KDAT_CACHE_DIR && " $knows " == *" kdat "* ]] && : > "$CRIU_KDAT_CACHE_DIR/criu.kdat"
exit 0
)";
}

fs::path write_fake(const ScratchDir& dir, const std::string& knows) {
  fs::path p = dir.path() / "criu";
  std::ofstream(p) << fake_criu(knows);
  ::chmod(p.c_str(), 0755);
  return p;
}

}  // namespace

TEST_CASE("every capability has a name, a patch and what its absence costs") {
  for (std::size_t i = 0; i < criu::kCapabilities; ++i) {
    auto c = static_cast<Capability>(i);
    const criu::CapabilityInfo& info = criu::info(c);
    CHECK(std::string(info.patch).find(".patch") != std::string::npos);
    CHECK(std::string(info.without).size() > 20);
    Capability back;
    REQUIRE(criu::capability_named(info.name, &back));
    CHECK(back == c);
  }
  Capability none;
  CHECK_FALSE(criu::capability_named("cow", &none));
  CHECK(
      criu::Capabilities::lacking(Capability::cow_dump, "host memory written inside the freeze") ==
      "host memory written inside the freeze: this CRIU lacks cow-dump (0005-cow-dump.patch; "
      "gcr doctor lists what it lacks)");
}

TEST_CASE("a CRIU that knows none of the options: each said absent, and why") {
  if (::geteuid() != 0) return;  // CRIU runs with --unprivileged otherwise: the same, one more arg
  ScratchDir dir;
  auto caps = criu::probe_capabilities(write_fake(dir, ""));
  CHECK_FALSE(caps.has(Capability::cow_dump));
  CHECK(caps.state(Capability::cow_dump).seen == "this CRIU does not know --cow-dump");
  CHECK(caps.state(Capability::cow_dump).probed);
  CHECK_FALSE(caps.has(Capability::cow_track));
  CHECK(caps.state(Capability::cow_track).seen == "needs cow-dump");
  CHECK_FALSE(caps.has(Capability::cow_dma));
  CHECK_FALSE(caps.has(Capability::kdat_cache_dir));
  CHECK_FALSE(caps.has(Capability::terminal_onto_any_file));
  CHECK_FALSE(caps.has(Capability::session_outside_pidns));
  CHECK_FALSE(caps.has(Capability::lazy_pages_pipelined));  // no record of gcr's set-up beside it
  CHECK_FALSE(caps.state(Capability::lazy_pages_pipelined).probed);
}

TEST_CASE("options dropped one by one until the dump runs; each present only if it did its work") {
  if (::geteuid() != 0) return;
  ScratchDir dir;
  // --cow-track is refused; --cow-dump and --cow-dma are known and log their work; the kernel
  // probe's cache lands in the directory named.
  auto caps = criu::probe_capabilities(write_fake(dir, "--cow-dump --cow-dma kdat"));
  CHECK(caps.has(Capability::cow_dump));
  CHECK(caps.has(Capability::cow_dma));
  CHECK(caps.has(Capability::kdat_cache_dir));
  CHECK_FALSE(caps.has(Capability::cow_track));
  CHECK(caps.state(Capability::cow_track).seen == "this CRIU does not know --cow-track");
}

TEST_CASE("an option known but without its work is not a capability") {
  if (::geteuid() != 0) return;
  ScratchDir dir;
  // Knows --cow-track, but no userfaultfd ever comes back on its socket.
  auto caps = criu::probe_capabilities(write_fake(dir, "--cow-dump --cow-track --cow-dma"));
  CHECK(caps.has(Capability::cow_dump));
  CHECK_FALSE(caps.has(Capability::cow_track));
  CHECK(caps.state(Capability::cow_track).seen == "a live dump handed no userfaultfd over");
  CHECK_FALSE(caps.has(Capability::kdat_cache_dir));
}

TEST_CASE("answers are kept per binary: a changed binary is probed again") {
  if (::geteuid() != 0 || criu::kdat_cache_dir().empty()) return;
  ScratchDir dir;
  fs::path criu = write_fake(dir, "");
  CHECK_FALSE(criu::capabilities_of(criu).has(Capability::cow_dump));
  // Rewritten (a new inode and size): probed again, from this process too.
  fs::remove(criu);
  criu = write_fake(dir, "--cow-dump");
  CHECK(criu::capabilities_of(criu).has(Capability::cow_dump));
  CHECK(&criu::capabilities_of(criu) == &criu::capabilities_of(criu));
}

TEST_CASE("the answers kept for a binary that is gone go when another is probed") {
  if (::geteuid() != 0 || criu::kdat_cache_dir().empty()) return;
  auto kept_for = [](const fs::path& criu) {
    int n = 0;
    for (const auto& e : fs::directory_iterator(criu::kdat_cache_dir())) {
      std::ifstream in(e.path());
      std::string header, path;
      if (std::getline(in, header) && std::getline(in, path) && path == criu.string()) ++n;
    }
    return n;
  };
  fs::path gone;
  {
    ScratchDir dir;
    gone = write_fake(dir, "");
    (void)criu::capabilities_of(gone);
    CHECK(kept_for(gone) == 1);
  }
  ScratchDir other;
  (void)criu::capabilities_of(write_fake(other, "--cow-dump"));
  CHECK(kept_for(gone) == 0);
}
