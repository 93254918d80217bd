// The interposer's tests: Catch2's runner, or a child mode (`--child <mode> ...`,
// child_modes.cpp) when a test runs this program as another process.
#define CATCH_CONFIG_RUNNER
#include <signal.h>

#include <catch2/catch.hpp>
#include <cstring>

#include "common.h"

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "--child") == 0)
    return ipt::run_child_mode(argc - 2, argv + 2);
  signal(SIGPIPE, SIG_IGN);  // a child that dies early must fail a check, not kill the tests
  return Catch::Session().run(argc, argv);
}
