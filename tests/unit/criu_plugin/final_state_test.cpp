// criu-plugin/final_state.cpp: Note [Leave running].
#include "final_state.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "scratch_dir.h"

using namespace gcr::criu_plugin;

namespace {

// A scratch directory for CRIU configuration files (and a $HOME holding them).
struct ConfigDir : ScratchDir {
  std::string write(const std::string& name, const std::string& text) {
    std::string p = path() / name;
    std::ofstream(p) << text;
    return p;
  }
};

const std::vector<std::string> kDump = {"criu", "dump", "-t", "123", "-D", "img"};

std::vector<std::string> with(std::vector<std::string> argv,
                              std::initializer_list<std::string> more) {
  argv.insert(argv.end(), more);
  return argv;
}

}  // namespace

TEST_CASE("GCR_LEAVE_RUNNING decides when set, whatever the command line says") {
  CHECK(guess_final_state(true, kDump, "", "").state == FinalState::kept);
  CHECK(guess_final_state(false, with(kDump, {"-R"}), "", "").state == FinalState::killed);
  CHECK(guess_final_state(true, {"criu", "swrk", "3"}, "", "").state == FinalState::kept);
}

TEST_CASE("-R, --leave-running, -s and --leave-stopped on the command line keep the tasks") {
  ConfigDir home;  // no ~/.criu/default.conf in it
  for (const char* opt : {"-R", "--leave-running", "-s", "--leave-stopped"}) {
    INFO(opt);
    CHECK(guess_final_state(std::nullopt, with(kDump, {opt}), home.path(), "").state ==
          FinalState::kept);
  }
  CHECK(guess_final_state(std::nullopt, with(kDump, {"--no-default-config"}), home.path(), "")
            .state == FinalState::killed);
}

TEST_CASE("leave-running in a configuration file CRIU reads keeps the tasks") {
  ConfigDir dir;
  std::string keeps = dir.write("keeps.conf", "# comment\n  tcp-established\nleave-running\n");
  std::string plain = dir.write("plain.conf", "tcp-established\n# leave-running\n");
  auto argv = with(kDump, {"--no-default-config"});
  CHECK(guess_final_state(std::nullopt, argv, "", keeps).state ==
        FinalState::kept);  // CRIU_CONFIG_FILE
  CHECK(guess_final_state(std::nullopt, argv, "", plain).state == FinalState::killed);
  CHECK(guess_final_state(std::nullopt, with(kDump, {"--config", keeps}), "", "").state ==
        FinalState::kept);
  CHECK(guess_final_state(std::nullopt, with(kDump, {"--config=" + keeps}), "", "").state ==
        FinalState::kept);
  // ~/.criu/default.conf, unless --no-default-config
  std::filesystem::create_directories(dir / ".criu");
  dir.write(".criu/default.conf", "--leave-stopped\n");
  CHECK(guess_final_state(std::nullopt, kDump, dir.path(), "").state == FinalState::kept);
  CHECK(guess_final_state(std::nullopt, argv, dir.path(), "").state == FinalState::killed);
}

TEST_CASE("criu over RPC (swrk, service) cannot be read, and counts as unknown") {
  CHECK(guess_final_state(std::nullopt, {"criu", "swrk", "3"}, "", "").state ==
        FinalState::unknown);
  CHECK(guess_final_state(std::nullopt, {"criu", "service"}, "", "").state == FinalState::unknown);
  CHECK(guess_final_state(std::nullopt, {"criu"}, "", "").state == FinalState::unknown);
}

TEST_CASE("criu over RPC, retitled by setproctitle, is unknown whatever its title says") {
  auto g = guess_final_state(std::nullopt, {"criu: dump --rpc -t 1234"}, "", "");
  CHECK(g.state == FinalState::unknown);
  g = guess_final_state(std::nullopt, {"criu", "swrk", "3"}, "", "");
  CHECK(g.state == FinalState::unknown);
}
