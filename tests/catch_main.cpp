// The main() of the test programs that need nothing before Catch2's runner.
#include "catch_run.h"

int main(int argc, char** argv) {
  return gcr_catch_run(argc, argv);
}
