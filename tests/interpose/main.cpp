// The interposer's tests: Catch2's runner, or a child mode (`--child <mode> ...`,
// child_modes.cpp) when a test runs this program as another process.
#include <signal.h>

#include <cstring>

#include "catch_run.h"
#include "common.h"

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "--child") == 0)
    return ipt::run_child_mode(argc - 2, argv + 2);
  signal(SIGPIPE, SIG_IGN);  // a child that dies early must fail a check, not kill the tests
  return gcr_catch_run(argc, argv);
}
