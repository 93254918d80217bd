// Catch2's main for the control channel's unit tests (tests/unit/control/CMakeLists.txt runs one
// ctest entry per tag: [messages], [channel], [rendezvous], [session], [client]).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
