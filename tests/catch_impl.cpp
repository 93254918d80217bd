// Catch2's implementation, compiled once for every test program (it is most of a test build's
// time): programs with their own main() link gcr_catch and call gcr_catch_run, the others link
// gcr_catch_main.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_run.h"

int gcr_catch_run(int argc, char** argv) {
  return Catch::Session().run(argc, argv);
}
