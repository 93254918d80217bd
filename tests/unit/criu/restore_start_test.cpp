// Note [Lazy-pages daemon started beside the restore] (libgcr/criu/criu_run.cpp), against a
// stand-in for CRIU: a script that logs how it was run, whose `lazy-pages` says it listens on its
// status fd (or fails, FAKE_DAEMON=fail) and whose `restore` does what gcr's plugin does at its
// init: with GCR_RESTORE_GO_FD it says it waits and waits for the go, failing without one
// (FAKE_PLUGIN=old: a plugin that does not wait). A restore with --lazy-pages fails while the
// daemon does not listen yet, as CRIU's connect would. As root only (an unprivileged CRIU needs
// file capabilities): elsewhere each case passes without checking anything, and says so.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gcr/criu.h"
#include "scratch_dir.h"

namespace fs = std::filesystem;
using namespace gcr;

namespace {

constexpr const char* kFakeCriu = R"(#!/bin/bash
trap "" PIPE  # as the plugin sends with MSG_NOSIGNAL
echo "$*${GCR_RESTORE_GO_FD:+ go-fd}" >> "$FAKE_LOG"
# wait_for TEXT: until the log holds TEXT (5 s at most)
wait_for() { for _ in $(seq 100); do grep -qF -- "$1" "$FAKE_LOG" && return; sleep 0.05; done; }
case "$1" in
  lazy-pages)
    [[ $FAKE_DAEMON == fail ]] && { echo "cannot listen" > "$3/lazy-pages.log"; exit 1; }
    # its start outlasts the restore's: the restore must be running (or, with another gcr's
    # plugin, have failed to connect) before the daemon listens
    if [[ $FAKE_PLUGIN == old ]]; then wait_for "restore: connect failed"; else wait_for "restore -D"; fi
    echo listening >> "$FAKE_LOG"
    printf x >&3
    exec sleep 30 ;;
  restore)
    if [[ -n $GCR_RESTORE_GO_FD && $FAKE_PLUGIN != old ]]; then
      printf w >&3 2>/dev/null
      IFS= read -r -n1 go <&3 || true
      [[ $go == g ]] || { echo "restore: no go" >> "$FAKE_LOG"; exit 1; }
      echo "restore: go" >> "$FAKE_LOG"
    fi
    if [[ " $* " == *" --lazy-pages "* ]] && ! grep -q listening "$FAKE_LOG"; then
      echo "restore: connect failed" >> "$FAKE_LOG"
      exit 1
    fi
    while [[ $# -gt 0 && $1 != --pidfile ]]; do shift; done
    echo 4242 > "$2"
    exit 0 ;;
esac
exit 1
)";

struct Fixture {
  ScratchDir dir;
  criu::Tools tools;
  criu::RestoreOptions ro;
  criu::LazyPages lazy;  // ro.lazy_pages: every case restores lazily
  pid_t restored = 0;
  Fixture(bool with_plugin) {
    fs::create_directories(dir / "images");
    fs::create_directories(dir / "plugins");
    if (with_plugin) std::ofstream(dir / "plugins" / "gcr_criu_plugin.so") << "";
    std::ofstream(dir / "criu") << kFakeCriu;
    chmod((dir / "criu").c_str(), 0755);
    tools.criu = dir / "criu";
    tools.plugin_dir = dir / "plugins";
    ro.image_dir = dir / "images";
    ro.restored_pid = &restored;
    ro.lazy_pages = &lazy;
    setenv("FAKE_LOG", (dir / "log").c_str(), 1);
    unsetenv("FAKE_DAEMON");
    unsetenv("FAKE_PLUGIN");
  }
  std::string log() const {
    std::ifstream in(dir / "log");
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
};

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// An unprivileged CRIU would need file capabilities.
bool as_root() {
  if (geteuid() == 0) return true;
  WARN("not root: not run");
  return false;
}

}  // namespace

TEST_CASE("the restore starts beside the lazy-pages daemon and goes once the daemon listens") {
  if (!as_root()) return;
  Fixture f(true);
  bool before = false;
  f.ro.before_criu = [&] { before = true; };
  REQUIRE(criu::restore(f.tools, f.ro));
  const std::string log = f.log();
  INFO(log);
  CHECK(f.restored == 4242);
  CHECK(before);
  CHECK(f.lazy.running());  // handed over
  CHECK(count(log, "restore: connect failed") == 0);
  CHECK(count(log, "restore -D") == 1);
  CHECK(log.find("--lazy-pages go-fd") != std::string::npos);
  // Both started before the daemon listened; the restore went only after.
  CHECK(log.find("restore -D") < log.find("listening"));
  CHECK(log.find("listening") < log.find("restore: go"));
}

TEST_CASE("a daemon that does not start: the restore runs again the usual way") {
  if (!as_root()) return;
  Fixture f(true);
  setenv("FAKE_DAEMON", "fail", 1);
  REQUIRE(criu::restore(f.tools, f.ro));
  const std::string log = f.log();
  INFO(log);
  CHECK(f.restored == 4242);
  CHECK(!f.lazy.running());
  CHECK(count(log, "restore: no go") == 1);  // the first, without its go, made nothing
  CHECK(count(log, "restore -D") == 2);      // and the second ran
  CHECK(count(log, "--lazy-pages") == 1);    // without lazy pages
  CHECK(count(log, "go-fd") == 1);
}

TEST_CASE("a daemon that does not start, when only it could bring the memory: an error") {
  if (!as_root()) return;
  Fixture f(true);
  setenv("FAKE_DAEMON", "fail", 1);
  f.ro.lazy_pages_socket = 2;  // any open fd: the daemon is never asked
  Status s = criu::restore(f.tools, f.ro);
  REQUIRE(!s);
  CHECK(s.error().message.find("criu lazy-pages did not start") != std::string::npos);
  CHECK(s.error().message.find("cannot listen") != std::string::npos);
  CHECK(count(f.log(), "restore -D") == 1);
}

TEST_CASE("without gcr's plugin to wait, the daemon is started first, as before") {
  if (!as_root()) return;
  Fixture f(false);
  REQUIRE(criu::restore(f.tools, f.ro));
  const std::string log = f.log();
  INFO(log);
  CHECK(log.find("listening") < log.find("restore -D"));
  CHECK(count(log, "go-fd") == 0);
}

TEST_CASE("another gcr's plugin, which does not wait: once the daemon listens, the restore again") {
  if (!as_root()) return;
  Fixture f(true);
  setenv("FAKE_PLUGIN", "old", 1);
  int spawned = 0;
  f.ro.on_spawned = [&](pid_t) { ++spawned; };
  REQUIRE(criu::restore(f.tools, f.ro));
  const std::string log = f.log();
  INFO(log);
  CHECK(f.restored == 4242);
  CHECK(f.lazy.running());
  CHECK(spawned == 2);
  CHECK(count(log, "restore: connect failed") == 1);
  CHECK(count(log, "restore -D") == 2);
  CHECK(count(log, "lazy-pages -D") == 1);  // the same daemon, listening by then
}
