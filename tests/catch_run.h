// Catch2's runner, compiled once in tests/catch_impl.cpp (its Session class exists only there).
#pragma once

int gcr_catch_run(int argc, char** argv);
